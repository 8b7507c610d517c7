"""Placement on a small Slurm cluster (2 nodes of 4 CPUs and 2 fake GPUs
each, steps bound to their CPUs by task/affinity, started by the test):
specs with more roles than nodes run, roles sharing nodes; a spec that
cannot fit is refused with figures before anything is submitted; a
task's CPUs and GPUs are those Slurm gave its step, not ids handed out by
the coordinator. (task/affinity binds a step to real CPU ids: on a small
machine, keep each node's tasks within its real cores.)"""
import re
import subprocess

import pytest

from clusters import SlurmCluster, available

pytestmark = pytest.mark.skipif(not available(), reason="slurm-wlm and munge are not installed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("slurm2"), nodes=("n1", "n2"), gpus=2,
                     task_plugin="task/affinity").start()
    yield c
    c.stop()


def squeue(cluster):
    return subprocess.run(["squeue", "-h", "-o", "%i %T %r"], env=cluster.env,
                          capture_output=True, text=True).stdout


@pytest.fixture
def sloom(loom, cluster):
    loom.env.update(SLURM_CONF=str(cluster.conf))
    yield loom
    subprocess.run(["scancel", "--user=root"], env=cluster.env, capture_output=True)
    loom.wait_for(lambda: not squeue(cluster).strip(), timeout=20, what="Slurm queue empty")


def lines(out, what):
    return sorted(l.split("] ", 1)[1] for l in out.splitlines() if f"] {what} " in l)


def test_more_roles_than_nodes_runs(sloom, cluster):
    # the spec that runs locally: four roles, five tasks, on two nodes; it
    # used to be four heterogeneous components, one node each, pending forever
    # the chief waits for the ps to have printed (a service is stopped when
    # the others finish, perhaps before its shell ran at all)
    mark = sloom.tmp / "ps-ran"
    spec = sloom.spec(f"""
name: roles4
backend: slurm
roles:
  chief: {{command: 'i=0; while [ ! -e {mark} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo "ran $LOOM_TASK node=$SLURMD_NODENAME rank=$RANK"'}}
  worker:
    instances: 2
    procs: 2
    command: 'echo "ran $LOOM_TASK node=$SLURMD_NODENAME rank=$RANK local=$LOCAL_RANK"'
  ps: {{command: 'echo "ran $LOOM_TASK node=$SLURMD_NODENAME"; touch {mark}; sleep 300'}}
  evaluator: {{command: 'echo "ran $LOOM_TASK node=$SLURMD_NODENAME"'}}
""")
    r = sloom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = lines(r.stdout, "ran")
    assert len(ran) == 1 + 4 + 1 + 1, ran
    assert sorted(int(l.split("rank=")[1].split()[0]) for l in ran if "rank=" in l) == list(range(5))
    assert {l.split("node=")[1].split()[0] for l in ran} <= set(cluster.nodes)
    script = (sloom.job_dir() / "slurm.sh").read_text()
    # one shape: one component, roles sharing the nodes
    assert "#SBATCH hetjob" not in script and "#SBATCH --ntasks=5 --cpus-per-task=1" in script
    assert sloom.state()["state"] == "succeeded"


def test_different_shapes_are_packed(sloom, cluster):
    # three shapes on two nodes: no heterogeneous layout fits, so every task
    # is asked at the largest shape, in one component
    spec = sloom.spec("""
name: shapes3
backend: slurm
roles:
  chief: {vcores: 1, command: 'echo "ran $LOOM_TASK cpus=$SLURM_CPUS_PER_TASK"'}
  worker: {instances: 2, vcores: 2, command: 'echo "ran $LOOM_TASK cpus=$SLURM_CPUS_PER_TASK"'}
  evaluator: {vcores: 1, memory: 512MiB, command: 'echo "ran $LOOM_TASK cpus=$SLURM_CPUS_PER_TASK"'}
""")
    r = sloom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # each step still asks for the task's own CPUs
    assert lines(r.stdout, "ran") == ["ran chief:0 cpus=1", "ran evaluator:0 cpus=1",
                                      "ran worker:0 cpus=2", "ran worker:1 cpus=2"]
    script = (sloom.job_dir() / "slurm.sh").read_text()
    assert "#SBATCH hetjob" not in script, script
    assert "#SBATCH --ntasks=4 --cpus-per-task=2 --mem-per-cpu=256M" in script, script


def test_spec_that_cannot_fit_is_refused_with_figures(sloom, cluster):
    # every task fits a node, but not all of them together
    spec = sloom.spec("""
name: toobig
backend: slurm
roles:
  worker: {instances: 3, vcores: 4, gpus: 1, command: 'true'}
""")
    r = sloom.run("run", spec, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr
    assert "cannot be placed on Slurm partition 'cpu'" in err, err
    assert "it needs 3 tasks, 12 CPUs" in err and "3 GPUs" in err, err
    assert "worker: 3 x 4 CPUs, 1 GPUs" in err, err
    assert "the partition has 2 nodes, 8 CPUs, 8 GiB and 4 GPUs in all: n1 4 CPUs" in err, err
    # refused before anything was made or submitted
    assert squeue(cluster).strip() == "" and sloom.jobs() == []
    # a task larger than any node
    spec = sloom.spec("name: gpu3\nbackend: slurm\nroles:\n  w: {gpus: 3, command: 'true'}\n",
                      name="g.yaml")
    r = sloom.run("run", spec, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "role 'w' asks for 1 vcores, no set amount of memory and 3 GPUs per task" in r.stderr
    assert "has 4 CPUs, 4 GiB and 2 GPUs (2 nodes)" in r.stderr, r.stderr


def cpu_list(mask_hex):
    m = int(mask_hex, 16)
    return [i for i in range(64) if m >> i & 1]


def parse_list(s):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def test_cpus_and_gpus_come_from_the_step(sloom, cluster):
    # four tasks of one GPU each on two nodes of two GPUs: Slurm gives each
    # step its own GPU and CPU on its node; the task keeps exactly those
    probe = ('echo "res $LOOM_TASK node=$SLURMD_NODENAME cuda=$CUDA_VISIBLE_DEVICES '
             'step_gpus=$SLURM_STEP_GPUS bind=$SLURM_CPU_BIND_LIST '
             'allowed=$(grep Cpus_allowed_list /proc/self/status | cut -f2)"; sleep 1')
    spec = sloom.spec(f"""
name: sgpu
backend: slurm
roles:
  worker: {{instances: 4, gpus: 1, command: '{probe}'}}
""")
    r = sloom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    res = [dict(kv.split("=", 1) for kv in l.split()[2:]) for l in lines(r.stdout, "res")]
    assert len(res) == 4, r.stdout
    print(res)
    for t in res:
        assert t["cuda"] and t["cuda"] == t["step_gpus"], t
        assert t["bind"], t  # task/affinity bound the step
        assert parse_list(t["allowed"]) == cpu_list(t["bind"]), t
    # per node, every task has GPUs and CPUs of its own
    assert len({(t["node"], t["cuda"]) for t in res}) == 4, res
    for n in cluster.nodes:
        cpus = [c for t in res if t["node"] == n for c in parse_list(t["allowed"])]
        assert len(cpus) == len(set(cpus)), res
    script = (sloom.job_dir() / "slurm.sh").read_text()
    assert "--gpus-per-task=1" in script


# What GPUs a task sees (test_gpus.py has the other backends')
GPU_PRINT = "echo set=${CUDA_VISIBLE_DEVICES+yes} val=[${CUDA_VISIBLE_DEVICES-}]"


def test_slurm_gpus_zero_sees_none_and_gpus_keep_the_steps(sloom):
    """A job with GPUs: the client's CUDA_VISIBLE_DEVICES reaches every step
    (sbatch and srun export the environment); the chief (gpus: 0) must not
    see it, each worker sees the GPU Slurm gave its step."""
    probe = GPU_PRINT + " step=[${SLURM_STEP_GPUS-}]"
    s = sloom.spec(f"""
name: sgpus
backend: slurm
roles:
  chief: {{gpus: 0, command: '{probe}'}}
  worker: {{instances: 2, gpus: 1, command: '{probe}'}}
""")
    r = sloom.run("run", s, timeout=120, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = {m[1]: (m[2], m[3], m[4]) for m in
           re.finditer(r"^\[(\w+:\d+)\] set=(\w*) val=\[([^\]]*)\] step=\[([^\]]*)\]$",
                       r.stdout, re.M)}
    assert set(got) == {"chief:0", "worker:0", "worker:1"}, r.stdout
    assert got["chief:0"][:2] == ("yes", ""), got
    for w in ("worker:0", "worker:1"):
        assert got[w][0] == "yes" and got[w][1] and got[w][1] == got[w][2], got
