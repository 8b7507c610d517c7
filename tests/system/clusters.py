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
import random
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


def start_hadoop(d: Path, protection: str | None = None):
    """Starts YARN and HDFS in d (`yarn-cluster.sh start --hdfs --protection P
    d`): returns when the RM lists both NodeManagers RUNNING and the NameNode
    has both DataNodes and has left safe mode, or raises with the script's
    words. P, hadoop.rpc.protection: LOOM_TEST_RPC_PROTECTION, or privacy, so
    that every token connection of the one-host tests is wrapped (DIGEST-MD5
    auth-conf, 3DES)."""
    protection = protection or os.environ.get("LOOM_TEST_RPC_PROTECTION", "privacy")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "start", "--hdfs", "--protection", protection,
                        str(d)], capture_output=True, text=True, timeout=400)
    if r.returncode != 0:
        stop_hadoop(d)
        raise RuntimeError(f"yarn-cluster.sh start --hdfs failed:\n{r.stderr[-4000:]}")
    assert r.stdout.strip() == f"export HADOOP_CONF_DIR={d}/conf", r.stdout
    print(f"\nYARN and HDFS up in {time.monotonic() - t0:.1f}s")


def start_secure_hdfs(d: Path, kdc_dir: Path, protection="privacy", data_protection=None,
                      encrypt=None):
    """Starts a Kerberized HDFS alone in d (`yarn-cluster.sh start
    --hdfs-only --protection P [--data-protection D] [--encrypt-data E]
    --kerberos KDIR d`: a NameNode and two DataNodes logged in from KDIR's
    keytabs, tests/system/kdc.py's; with D, the DataNodes'
    dfs.data.transfer.protection; with E, dfs.encrypt.data.transfer with
    that algorithm):
    returns when the NameNode has both DataNodes and has left safe mode, or
    raises with the script's words. stop_hadoop(d) stops it."""
    t0 = time.monotonic()
    dp = ["--data-protection", data_protection] if data_protection else []
    dp += ["--encrypt-data", encrypt] if encrypt else []
    r = subprocess.run(["bash", str(SCRIPT), "start", "--hdfs-only", "--protection", protection,
                        *dp, "--kerberos", str(kdc_dir), str(d)], capture_output=True,
                       text=True, timeout=400)
    if r.returncode != 0:
        stop_hadoop(d)
        raise RuntimeError(f"yarn-cluster.sh start --hdfs-only --kerberos failed:\n"
                           f"{r.stderr[-4000:]}")
    assert r.stdout.strip() == f"export HADOOP_CONF_DIR={d}/conf", r.stdout
    print(f"\nKerberized HDFS up in {time.monotonic() - t0:.1f}s")


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
                 task_plugin="task/none", hide_builds=False):
        self.root = root
        # hide_builds: each slurmd (and every job step it starts) runs in a
        # mount namespace of its own in which the loom build directories
        # are empty (hidden.wrap_builds), as on nodes without loom; the
        # checkout's python/ stays visible; loom jobs run the binary the
        # backend ships (the job directory's copy, sbcast to the nodes).
        # Off by default: test_slurm starts such a cluster of its own.
        self.hide_builds = hide_builds
        self.hidden = []
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
            # job ids of their own: loom stages a job's files in the nodes'
            # /tmp/loom-files-JOBID and /tmp/loom-JOBID, and another Slurm
            # cluster on this host (the other pass of scripts/test.sh, a
            # second cluster of this run) must not take the same names
            f"FirstJobId={random.randrange(1, 60000) * 1000}",
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
        if self.hide_builds:
            import hidden
            self.hidden = hidden.build_dirs()
        for n in self.nodes:
            cmd = ["slurmd", "-D", "-N", n, "-f", str(self.conf)]
            if self.hide_builds:
                cmd = hidden.wrap_builds(cmd)
            self.procs.append(subprocess.Popen(cmd, env=self.env, start_new_session=True,
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


# ---- Hadoop on hosts of their own ----

class HadoopHosts:
    """YARN and HDFS on three "hosts" (network namespaces on a bridge) and
    the client on a fourth, the test process's own namespace, which gets an
    address on the same bridge (so that loom, Hadoop's Java client and the
    test's own HTTP requests reach every daemon as they are, and the
    daemons reach back: a coordinator the client starts is reachable from
    the containers):

      head   10.79.K.1    ResourceManager, NameNode
      node1  10.79.K.2    NodeManager nm1 (label gpu), DataNode dn1
      node2  10.79.K.3    NodeManager nm2, DataNode dn2
      client 10.79.K.100  this process (client_link, an interface in the
                          machine's own namespace whose peer is on the
                          bridge: what a node reaches the client at)

    K comes from the pid; every name has the pid in it (`loomh<pid>`), so
    that test runs at once do not clash. Each daemon runs in its host's
    network namespace and in a mount namespace of its own (hidden.wrap:
    what a stock node lacks hidden, the host's own /tmp, DIR/host-ROLE/tmp
    on this machine, a UTS namespace with the host's name loom-ROLE, an
    /etc/hosts of its own that names no address of the bridge, so that a
    NodeManager's node id is its address), in which it sees, of the
    cluster's directory, only its own daemons' (yarn-cluster.sh --hosts).
    A YARN container is the NodeManager's child: it has the same view.

    stop() stops the daemons, kills whatever is left in the namespaces,
    deletes them and checks that no JVM, namespace or link of the cluster
    is left (the mount namespaces end with their last process)."""

    ROLES = ("head", "node1", "node2")

    def __init__(self, d: Path, tag=None, k=None):
        """d: the cluster's directory, under /tmp (each host sees its own
        part of it inside its own /tmp). tag: other names than the pid's,
        for a second cluster in the same process; k: a fixed subnet
        10.79.K.0/24 (else the first one free on this host, _subnet)."""
        pid = os.getpid()
        self.dir = d
        self.conf = d / "conf"
        self.tag = tag or f"loomh{pid}"
        self.k_given = k is not None
        self.k = k if k is not None else 16 + pid % 224
        self.hub = f"{self.tag}-hub"
        self.ns = {r: f"{self.tag}-{r}" for r in self.ROLES}
        self.addrs = {r: f"10.79.{self.k}.{i + 1}" for i, r in enumerate(self.ROLES)}
        self.addrs["client"] = f"10.79.{self.k}.100"
        self.client_link = f"{self.tag}c"
        self.made = []
        self.start_s = None

    # -- namespaces

    def _ns(self, name):
        from netns import ip
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    @staticmethod
    def clean_stale():
        """Deletes the namespaces and links of HadoopHosts whose process is
        gone (a run killed before it could stop its cluster); kills what
        still runs in them."""
        from netns import ip

        def gone(pid):
            return not Path(f"/proc/{pid}").exists()

        for line in ip("netns", "list", check=False).splitlines():
            m = re.match(r"(loom[hf](\d+)-\S+)", line)
            if m and gone(m.group(2)):
                for p in ip("netns", "pids", m.group(1), check=False).split():
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                ip("netns", "del", m.group(1), check=False)
        for line in ip("-o", "link", check=False).splitlines():
            m = re.search(r": (loom[hf](\d+)c)@", line)
            if m and gone(m.group(2)):
                ip("link", "del", m.group(1), check=False)

    def _subnet(self):
        """Picks self.k, unless given: the first 10.79.K.0/24 from the pid's
        on that no address on this host is in (another test process, the
        other pass of scripts/test.sh, may hold one), and addresses the
        roles in it. Called under _network's lock."""
        from netns import ip
        if self.k_given:
            return
        used = set(re.findall(r"\b10\.79\.(\d+)\.", ip("-o", "addr", check=False)))
        start = 16 + os.getpid() % 224
        for i in range(224):
            k = 16 + (start - 16 + i) % 224
            if str(k) not in used:
                break
        else:
            raise RuntimeError("no free 10.79.K.0/24 subnet on this host (K = 16..239)")
        self.k = k
        self.addrs = {r: f"10.79.{k}.{i + 1}" for i, r in enumerate(self.ROLES)}
        self.addrs["client"] = f"10.79.{k}.100"

    def _network(self):
        import fcntl
        self.clean_stale()
        # the subnet is chosen and the client's address taken under a lock
        # that every test process on this host shares
        with open("/tmp/loom-test-subnets.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._subnet()
            self._network_locked()

    def _network_locked(self):
        from netns import ip
        self._ns(self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for i, r in enumerate(self.ROLES):
            ns = self.ns[r]
            self._ns(ns)
            ip("-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "lan0",
               "netns", ns)
            ip("-n", self.hub, "link", "set", f"p{i}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{self.addrs[r]}/24", "dev", "lan0")
            ip("-n", ns, "link", "set", "lan0", "up")
        # the client: this namespace; its link goes when the hub does
        ip("link", "add", self.client_link, "type", "veth", "peer", "name", "pc", "netns",
           self.hub)
        ip("-n", self.hub, "link", "set", "pc", "master", "br0", "up")
        ip("addr", "add", f"{self.addrs['client']}/24", "dev", self.client_link)
        ip("link", "set", self.client_link, "up")

    def _wrappers(self):
        """DIR/hosts: yarn-cluster.sh's hosts file; DIR/on-ROLE runs a
        command on that host (ip netns exec + hidden.wrap)."""
        import shlex
        import hidden
        d = self.dir
        keep = {"head": [d / "conf", d / "labels", d / "hdfs", d / "rmstate"],
                "node1": [d / "nm1", d / "dn1"], "node2": [d / "nm2", d / "dn2"]}
        lines = []
        for r in self.ROLES:
            tmp = d / f"host-{r}" / "tmp"
            tmp.mkdir(parents=True, exist_ok=True)
            for k in keep[r]:
                k.mkdir(parents=True, exist_ok=True)
            # its own name resolves (Java asks at start), and no address of
            # the bridge has a name: a daemon's canonical host name is its
            # address (a NodeManager's node id, which clients connect to)
            etc = d / f"host-{r}" / "hosts"
            etc.write_text(f"127.0.0.1 localhost\n127.0.1.1 loom-{r}\n")
            argv = ["ip", "netns", "exec", self.ns[r],
                    *hidden.wrap([], tmp=str(tmp), keep=[str(k) for k in keep[r]],
                                 hostname=f"loom-{r}", etc_hosts=str(etc))]
            on = d / f"on-{r}"
            on.write_text(f"#!/bin/sh\n# runs a command on host {r}\nexec {shlex.join(argv)} "
                          '"$@"\n')
            on.chmod(0o755)
            lines.append(f"{r} {self.addrs[r]} {on}\n")
        (d / "hosts.in").write_text("".join(lines))

    # -- the cluster

    def start(self):
        t0 = time.monotonic()
        try:
            self._network()
            self._wrappers()
            r = subprocess.run(["bash", str(SCRIPT), "start", "--hdfs", "--hosts",
                                str(self.dir / "hosts.in"), str(self.dir)],
                               capture_output=True, text=True, timeout=400)
            if r.returncode != 0:
                raise RuntimeError(f"yarn-cluster.sh start --hdfs --hosts failed:\n"
                                   f"{r.stderr[-4000:]}")
            assert r.stdout.strip() == f"export HADOOP_CONF_DIR={self.dir}/conf", r.stdout
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - t0
        print(f"\nYARN and HDFS on 3 hosts up in {self.start_s:.1f}s")
        return self

    def stop(self):
        """Stops everything start() made; fails naming what was left."""
        from netns import ip
        errors = []
        if (self.dir / "pids").exists():
            s = subprocess.run(["bash", str(SCRIPT), "stop", str(self.dir)], capture_output=True,
                               text=True, timeout=120)
            if s.returncode != 0:
                errors.append(f"yarn-cluster.sh stop: {s.stderr[-2000:]}")
        left = jvm_pids(self.dir)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        if left:
            errors.append(f"JVMs of the cluster outlived `stop`: {left}")
        # a namespace's links go some time after `ip netns del`: this one,
        # in the machine's namespace, is deleted (both ends) here
        ip("link", "del", self.client_link, check=False)
        for ns in reversed(self.made):
            pids = ip("netns", "pids", ns, check=False).split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            end = time.time() + 10
            while pids and time.time() < end:
                pids = ip("netns", "pids", ns, check=False).split()
                time.sleep(0.05)
            if pids:
                errors.append(f"processes in {ns} outlived SIGKILL: {pids}")
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self.made = []
        leftover = [l for l in ip("netns", "list", check=False).splitlines() if self.tag in l]
        leftover += [l for l in ip("-o", "link", check=False).splitlines() if self.tag in l]
        leftover += [f"pid {p}" for p in jvm_pids(self.dir)]
        if errors or leftover:
            raise AssertionError(f"the Hadoop hosts were not cleaned up: {errors} {leftover}")

    # -- what tests use

    def ports(self):
        return {k: int(v) for k, v in
                (l.split() for l in (self.dir / "ports").read_text().splitlines())}

    @property
    def web(self):
        return f"http://{self.addrs['head']}:{self.ports()['web']}"

    @property
    def nn_web(self):
        return f"http://{self.addrs['head']}:{self.ports()['namenode-web']}"

    def url(self, path):
        """hdfs://HEAD:PORT/path on this cluster."""
        return f"hdfs://{self.addrs['head']}:{self.ports()['namenode']}{path}"

    def rest(self, path):
        with urllib.request.urlopen(f"{self.web}/ws/v1/cluster/{path}", timeout=10) as r:
            return json.load(r)

    def pid(self, daemon):
        """The pid of daemon rm, nn, nm1, nm2, dn1 or dn2."""
        return int((self.dir / "pids" / f"{daemon}.pid").read_text())

    def on_node(self, n, *cmd):
        """The command line that runs cmd as a container of NodeManager nmN
        would: in that NodeManager's network, mount and UTS namespaces (the
        node's view: its /tmp, what a stock node lacks hidden), from /."""
        return ["nsenter", "-t", str(self.pid(f"nm{n}")), "-n", "-m", "-u", "--wd=/", "--",
                *map(str, cmd)]

    def script(self, *args, timeout=120):
        """scripts/yarn-cluster.sh ARGS... DIR (nodemanager start N, ...)."""
        r = subprocess.run(["bash", str(SCRIPT), *map(str, args), str(self.dir)],
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (args, r.stderr[-3000:])
        return r

    def rss_mib(self):
        """{daemon: resident memory (MiB)} of the cluster's JVMs."""
        out = {}
        for f in (self.dir / "pids").glob("*.pid"):
            try:
                status = Path(f"/proc/{int(f.read_text())}/status").read_text()
            except (OSError, ValueError):
                continue
            m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
            if m:
                out[f.stem] = int(m.group(1)) / 1024
        return out


def dn_bytes_written(webs):
    """The DataNodes' BytesWritten (their DataNodeActivity metrics) summed,
    from their web addresses ("host:port" each): what was written to HDFS,
    for tests that count what a job uploaded."""
    total = 0
    for web in webs:
        url = f"http://{web}/jmx?qry=Hadoop:service=DataNode,name=DataNodeActivity-*"
        with urllib.request.urlopen(url, timeout=10) as r:
            beans = json.load(r)["beans"]
        assert len(beans) == 1, beans
        total += beans[0]["BytesWritten"]
    return total
