"""A real Slurm cluster on this machine for tests: munged, slurmctld and
slurmd nodes (n1, n2, n3 unless told), everything under one directory of
the test's own, started as plain processes and stopped at the end (it
needs Debian's slurmctld, slurmd and munge packages, no systemd and no
cgroups: linuxproc tracking, config_overrides for nodes larger than the
machine, and a fast backfill scheduler for heterogeneous jobs, all in the
slurm.conf written below). gpus > 0 gives every node that many
fake GPUs (gres on /dev/null symlinks: Slurm hands them out and sets
CUDA_VISIBLE_DEVICES); task_plugin="task/affinity" binds each step to its
CPUs."""
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


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
