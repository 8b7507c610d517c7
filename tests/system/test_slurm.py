"""The same specs on a real Slurm cluster (slurmctld + 3 slurmd + munged,
started by the test): heterogeneous jobs, placement, logs, failures,
retries, requeue, submit/kill."""
import json
import os
import subprocess
import time

import pytest

from conftest import loom_pids_of
from slurm_cluster import SlurmCluster, available

pytestmark = pytest.mark.skipif(not available(), reason="slurm-wlm and munge are not installed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield c
    c.stop()


@pytest.fixture
def sloom(loom, cluster):
    loom.env.update(SLURM_CONF=str(cluster.conf))
    yield loom
    subprocess.run(["scancel", "--user=root"], env=cluster.env, capture_output=True)
    # no job of ours is left in Slurm
    loom.wait_for(lambda: not subprocess.run(["squeue", "-h"], env=cluster.env, capture_output=True,
                                             text=True).stdout.strip(), timeout=20,
                  what="Slurm queue empty")


def squeue(cluster):
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], env=cluster.env, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("files_mode", ["sbcast", "shared"])
def test_heterogeneous_job_places_roles(sloom, cluster, tmp_path, files_mode):
    data = tmp_path / "input.txt"
    data.write_text("shared data\n")
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "part-0").write_text("part zero\n")
    sloom.env["LOOM_SLURM_FILES"] = files_mode
    spec = sloom.spec(f"""
name: het
backend: slurm
files: {{input.txt: {data}, data: {tmp_path / "dataset"}}}
roles:
  chief: {{command: 'echo "chief $SLURM_JOB_ID $SLURMD_NODENAME $RANK $MASTER_PORT"; cat input.txt data/part-0; readlink input.txt'}}
  worker:
    instances: 3
    vcores: 2
    memory: 256MiB
    command: 'echo "worker $LOOM_INDEX $SLURMD_NODENAME cpus=$SLURM_CPUS_PER_TASK rank=$RANK"'
""")
    r = sloom.run("run", spec, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "is Slurm job" in r.stderr and "succeeded" in r.stderr
    out = r.stdout.splitlines()
    chief = next(l for l in out if l.startswith("[chief:0] chief"))
    _, _, jobid, node, rank, port = chief.split()
    assert jobid.isdigit() and node in cluster.nodes and rank == "0" and port.isdigit()
    assert "[chief:0] shared data" in out and "[chief:0] part zero" in out
    link = next(l for l in out if l.startswith("[chief:0] /"))
    staged = [e for e in sloom.events() if e["event"] == "files_staged"]
    if files_mode == "sbcast":
        # a node-local copy made by sbcast, removed when the job ended
        assert link.startswith(f"[chief:0] /tmp/loom-files-{jobid}/") and len(staged) == 1
        assert not os.path.exists(f"/tmp/loom-files-{jobid}")
    else:
        assert link == f"[chief:0] {data}" and staged == []
    workers = [l for l in out if l.startswith("[worker:")]
    assert len(workers) == 3
    for l in workers:
        assert "cpus=2" in l, l
    assert sorted(l.split("rank=")[1] for l in workers) == ["1", "2", "3"]
    # one Slurm job with one component per role
    script = (sloom.job_dir() / "slurm.sh").read_text()
    assert script.count("#SBATCH hetjob") == 1
    assert "--ntasks=3 --cpus-per-task=2 --mem-per-cpu=128M" in script
    st = sloom.state()
    assert st["backend"] == "slurm" and st["state"] == "succeeded"
    assert json.loads((sloom.job_dir() / "slurm.json").read_text())["job_id"] == jobid


def test_failure_root_cause_and_retry_inside_the_allocation(sloom, cluster):
    spec = sloom.spec("""
name: sfail
backend: slurm
retries: 1
roles:
  worker: {instances: 2, command: 'if [ $LOOM_INDEX = 1 ] && [ $LOOM_ATTEMPT = 0 ]; then echo boom >&2; exit 5; fi; sleep 0.2; echo ok $LOOM_ATTEMPT'}
""")
    r = sloom.run("run", spec, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[worker:1] ok 1" in r.stdout
    fails = [e for e in sloom.events() if e["event"] == "failed"]
    assert [(e["task"], e["attempt"], e["exit_code"]) for e in fails] == [("worker:1", 0, 5)]
    spec = sloom.spec("name: sfail2\nbackend: slurm\nroles:\n  worker: {command: 'echo bad >&2; exit 3'}\n",
                      name="f2.yaml")
    r = sloom.run("run", spec, timeout=90)
    assert r.returncode == 1
    assert "root cause: worker:0" in r.stderr and "exited with code 3" in r.stderr
    assert "| bad" in r.stderr


def test_submit_status_logs_kill(sloom, cluster):
    spec = sloom.spec("""
name: sdetach
backend: slurm
roles:
  worker: {instances: 2, command: 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done'}
""")
    r = sloom.run("submit", spec, timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    sloom.wait_for(lambda: (sloom.job_dir() / "state.json").exists() and
                   all(t["state"] == "running" for t in sloom.state()["tasks"]), timeout=30,
                   what="running in Slurm")
    st = sloom.run("status", job)
    assert "running" in st.stdout
    time.sleep(1)
    logs = sloom.run("logs", job, "--task", "worker:1")
    assert "tick 2" in logs.stdout
    k = sloom.run("kill", job, timeout=30)
    assert k.returncode == 0, k.stderr
    assert sloom.state()["state"] == "killed"
    sloom.wait_for(lambda: squeue(cluster).strip() == "", timeout=20, what="Slurm job gone")


def test_kill_while_pending_cancels(sloom, cluster):
    spec = sloom.spec("""
name: spending
backend: slurm
roles:
  worker: {instances: 1, vcores: 4, command: 'sleep 30'}
""")
    hog = sloom.spec("""
name: hog
backend: slurm
roles:
  worker: {instances: 3, vcores: 4, command: 'sleep 30'}
""", name="hog.yaml")
    h = sloom.run("submit", hog, timeout=30)
    assert h.returncode == 0
    time.sleep(1)
    r = sloom.run("submit", spec, timeout=30)
    assert r.returncode == 0
    job = r.stdout.strip()
    time.sleep(1)
    k = sloom.run("kill", job, timeout=30)
    assert k.returncode == 0 and "cancelled while pending" in k.stdout, k.stdout + k.stderr
    assert sloom.run("kill", h.stdout.strip(), timeout=30).returncode == 0


def test_requeue_continues_attempts(sloom, cluster):
    spec = sloom.spec("""
name: srequeue
backend: slurm
roles:
  worker: {command: 'echo attempt $LOOM_ATTEMPT restart=$SLURM_RESTART_COUNT; if [ $LOOM_ATTEMPT = 0 ]; then sleep 60; fi'}
""")
    r = sloom.run("submit", spec, timeout=30)
    job = r.stdout.strip()
    sloom.wait_for(lambda: (sloom.job_dir() / "state.json").exists() and
                   sloom.state()["tasks"][0]["state"] == "running", timeout=30, what="running")
    sid = json.loads((sloom.job_dir() / "slurm.json").read_text())["job_id"]
    subprocess.run(["scontrol", "requeue", sid], env=cluster.env, check=True)
    sloom.wait_for(lambda: sloom.state().get("state") == "succeeded", timeout=60,
                   what="the requeued job to succeed")
    st = sloom.state()
    assert st["attempt"] >= 1
    log = sloom.run("logs", job, "--task", "worker:0").stdout
    assert "attempt 0 restart=" in log and "attempt 1 restart=1" in log


def test_impossible_request_is_refused(sloom, cluster):
    spec = sloom.spec("""
name: sbig
backend: slurm
roles:
  worker: {vcores: 64, command: 'true'}
""")
    r = sloom.run("run", spec, timeout=30)
    assert r.returncode == 2, r.stderr
    assert "Slurm refused the job" in r.stderr
