"""The clusters the system tests run on, in one place: Hadoop (YARN and
HDFS, through scripts/yarn-cluster.sh: a ResourceManager, two NodeManagers,
a NameNode and two DataNodes, each its own JVM) and Slurm (munged,
slurmctld and slurmd nodes as plain processes). conftest.py starts each
once per test run (pytest session) and shares it between the modules that
need it: the `yarn` and `hdfs` fixtures are the one Hadoop cluster's two
views; `slurm_cluster(...)` a Slurm cluster of a given shape.

Slurm needs Debian's slurmctld, slurmd and munge packages and nothing
else: no systemd and no cgroups (linuxproc tracking, config_overrides for
nodes larger than the machine, and a fast backfill scheduler for
heterogeneous jobs, all in the slurm.conf written below). gpus > 0 gives
every node that many fake GPUs (gres on /dev/null symlinks: Slurm hands
them out and sets CUDA_VISIBLE_DEVICES); task_plugin="task/affinity" binds
each step to its CPUs."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "yarn-cluster.sh"
# Hadoop's Java client (FsShell), the reference the HDFS tests compare with
JAVA_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Djava.net.preferIPv4Stack=true"]


def hadoop_available():
    return bool(shutil.which("java") and shutil.which("mvn"))


def jvm_pids(d: Path):
    """Pids of the JVMs of the Hadoop cluster that scripts/yarn-cluster.sh
    started in d (their -Dloom.yarn.dir=d)."""
    mark = f"-Dloom.yarn.dir={d}".encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if mark in (p / "cmdline").read_bytes().split(b"\0"):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def start_hadoop(d: Path):
    """Starts YARN and HDFS in d (`yarn-cluster.sh start --hdfs d`): returns
    when the RM lists both NodeManagers RUNNING and the NameNode has both
    DataNodes and has left safe mode, or raises with the script's words."""
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "start", "--hdfs", str(d)], capture_output=True,
                       text=True, timeout=400)
    if r.returncode != 0:
        stop_hadoop(d)
        raise RuntimeError(f"yarn-cluster.sh start --hdfs failed:\n{r.stderr[-4000:]}")
    assert r.stdout.strip() == f"export HADOOP_CONF_DIR={d}/conf", r.stdout
    print(f"\nYARN and HDFS up in {time.monotonic() - t0:.1f}s")


def stop_hadoop(d: Path):
    """Stops what start_hadoop started; fails if a JVM of it outlives that."""
    s = subprocess.run(["bash", str(SCRIPT), "stop", str(d)], capture_output=True, text=True,
                       timeout=120)
    left = jvm_pids(d)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert s.returncode == 0, s.stderr
    assert not left, f"JVMs of the Hadoop cluster outlived `stop`: {left}"


def hadoop_classpath():
    cp = subprocess.run(["bash", str(SCRIPT), "classpath"], capture_output=True, text=True,
                        timeout=300)
    assert cp.returncode == 0 and cp.stdout.strip(), cp.stderr
    return cp.stdout.strip()


class Yarn:
    def __init__(self, d: Path):
        self.dir = d
        self.conf = d / "conf"
        ports = dict(l.split() for l in (d / "ports").read_text().splitlines())
        self.rm_port = int(ports["rm"])
        self.nn_port = int(ports["namenode"])
        self.nn_web = f"http://127.0.0.1:{ports['namenode-web']}"
        self.web = f"http://127.0.0.1:{ports['web']}"
        self.nm_ports = [int(ports["nm1"]), int(ports["nm2"])]

    def rest(self, path):
        with urllib.request.urlopen(f"{self.web}/ws/v1/cluster/{path}", timeout=10) as r:
            return json.load(r)

    def apps(self):
        return (self.rest("apps").get("apps") or {}).get("app") or []

    def script(self, *args, timeout=120):
        """scripts/yarn-cluster.sh ARGS... DIR (nodemanager start N, ...)."""
        r = subprocess.run(["bash", str(SCRIPT), *map(str, args), str(self.dir)],
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (args, r.stderr[-3000:])
        return r


class Hdfs:
    def __init__(self, d: Path, classpath: str):
        self.dir = d
        self.conf = d / "conf"
        self.cp = f"{self.conf}:{classpath}"
        self.ports = {k: int(v) for k, v in
                      (l.split() for l in (d / "ports").read_text().splitlines())}
        self.nn = self.ports["namenode"]
        self.dn_ports = {i: self.ports[f"dn{i}"] for i in (1, 2)}

    def url(self, path):
        return f"hdfs://127.0.0.1:{self.nn}{path}"

    def java(self, *args, user=None, check=True, env=None, timeout=120):
        """Hadoop's FsShell (bytes out); -D options go first."""
        env = dict(os.environ, HADOOP_CONF_DIR=str(self.conf), **(env or {}))
        env.pop("HADOOP_USER_NAME", None)
        if user:
            env["HADOOP_USER_NAME"] = user
        r = subprocess.run(["java", *JAVA_OPTS, "-cp", self.cp, "org.apache.hadoop.fs.FsShell",
                            *map(str, args)], env=env, capture_output=True, timeout=timeout)
        if check:
            assert r.returncode == 0, (args, r.stderr.decode(errors="replace")[-3000:])
        return r

    def java_text(self, *args, **kw):
        return self.java(*args, **kw).stdout.decode()

    def script(self, *args, timeout=120):
        r = subprocess.run(["bash", str(SCRIPT), *map(str, args), str(self.dir)],
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (args, r.stderr[-3000:])
        return r

    def replicas(self, data: bytes):
        """{DataNode number: block file} of the one-block file holding data."""
        out = {}
        for i in (1, 2):
            for p in (self.dir / f"dn{i}" / "data").rglob("blk_*"):
                if not p.name.endswith(".meta") and p.stat().st_size == len(data) and \
                        p.read_bytes() == data:
                    assert i not in out, (out, p)
                    out[i] = p
        return out

    def served(self, dn: int, block: str):
        """How many reads of block (blk_<id>) DataNode dn has logged (its
        clienttrace line, which has another form for a client that gives no
        client name)."""
        log = (self.dir / "logs" / f"dn{dn}.log").read_text(errors="replace")
        return len(re.findall(rf"op: HDFS_READ, .*blockid: BP-[^:]+:{block}_\d+\b|"
                              rf"Served block BP-[^:]+:{block}_\d+ to ", log))


# ---- Slurm ----

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available():
    return all(shutil.which(x) for x in ("slurmctld", "slurmd", "munged", "mungekey", "sbatch",
                                         "srun", "scontrol"))


class SlurmCluster:
    def __init__(self, root: Path, nodes=("n1", "n2", "n3"), cpus=4, gpus=0,
                 task_plugin="task/none"):
        self.root = root
        self.nodes = nodes
        self.cpus = cpus
        self.gpus = gpus
        self.task_plugin = task_plugin
        self.procs = []
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def start(self):
        r = self.root
        for d in ("munge", "state", "log", "run", "spool", "tmp"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o755)
        key = r / "munge/munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        os.chmod(key, 0o600)
        sock = r / "munge/munge.socket.2"
        self.procs.append(subprocess.Popen(
            ["munged", "-F", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={r}/munge/munged.pid", f"--seed-file={r}/munge/seed",
             f"--log-file={r}/log/munged.log", "--force"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        ctl_port, ports = free_port(), [free_port() for _ in self.nodes]
        lines = [
            "ClusterName=loomtest", "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctl_port}", "SlurmUser=root", "SlurmdUser=root",
            f"AuthInfo=socket={sock},cred_expire=10", "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid", f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log", f"SlurmdLogFile={r}/log/slurmd-%n.log",
            f"TmpFS={r}/tmp/%n",
            "ProctrackType=proctrack/linuxproc", f"TaskPlugin={self.task_plugin}",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "SchedulerParameters=bf_interval=1,sched_interval=2,batch_sched_delay=0",
            "KillWait=2", "ReturnToService=2", "MpiDefault=none", "MinJobAge=300",
            "InactiveLimit=0", "SlurmdTimeout=30",
        ]
        gres = ""
        if self.gpus:
            lines.append("GresTypes=gpu")
            gres = f" Gres=gpu:{self.gpus}"
            fake = r / "fakedev"
            fake.mkdir(exist_ok=True)
            for i in range(self.gpus):
                if not (fake / f"gpu{i}").is_symlink():
                    os.symlink("/dev/null", fake / f"gpu{i}")
            (r / "gres.conf").write_text("AutoDetect=off\n" + "".join(
                f"NodeName={n} Name=gpu File={fake}/gpu[0-{self.gpus - 1}]\n" for n in self.nodes))
        for n, p in zip(self.nodes, ports):
            (r / "tmp" / n).mkdir(parents=True, exist_ok=True)
            lines.append(f"NodeName={n} NodeAddr=127.0.0.1 NodeHostname=localhost Port={p} "
                         f"CPUs={self.cpus} RealMemory=4096 Feature=cpu{gres} State=UNKNOWN")
        lines.append(f"PartitionName=cpu Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)],
                                           env=self.env, start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for n in self.nodes:
            self.procs.append(subprocess.Popen(["slurmd", "-D", "-N", n, "-f", str(self.conf)],
                                               env=self.env, start_new_session=True,
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        end = time.time() + 30
        while time.time() < end:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                                 capture_output=True, text=True, timeout=10).stdout.split()
            states = dict(zip(out[::2], out[1::2]))
            if all(states.get(n) == "idle" for n in self.nodes):
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"slurm did not come up: {(r / 'log/slurmctld.log').read_text()[-2000:]}")

    def stop(self):
        subprocess.run(["scancel", "--full", "--user=root"], env=self.env, capture_output=True,
                       timeout=20)
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        end = time.time() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []
