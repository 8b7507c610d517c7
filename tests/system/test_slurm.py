"""The same specs on a real Slurm cluster (slurmctld + 3 slurmd + munged:
conftest's `slurm`, started once a test run): heterogeneous jobs,
placement, logs, retries, requeue, submit/kill, many step launches at
once, and step launches that Slurm refuses. What each task of a
multi-role job sees, a failing task's root cause, `loom kill` and Ctrl-C
on `loom run`, and restart: task on Slurm are the backend contract's
cases (test_contract.py)."""
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import hidden
from conftest import BUILD, LOOM, ROOT, loom_pids_of
from clusters import SlurmCluster, available

pytestmark = pytest.mark.skipif(not available(), reason="slurm-wlm and munge are not installed")


@pytest.fixture
def cluster(slurm):
    """The test run's Slurm cluster (conftest's `slurm`, shared with test_contract)."""
    return slurm


def slurm_jobs_and_steps(cluster):
    """Every job ("ID STATE NAME") and step ("step ID NAME") in Slurm's queue."""
    def q(*args):
        return subprocess.run(["squeue", "-h", *args], env=cluster.env, capture_output=True,
                              text=True, check=True).stdout.splitlines()
    return q("-o", "%i %T %j") + ["step " + l for l in q("-s", "-o", "%i %j")]


@pytest.fixture
def sloom(loom, cluster):
    loom.env.update(SLURM_CONF=str(cluster.conf))
    before = set(slurm_jobs_and_steps(cluster))
    yield loom
    # No job or step of this test is left in Slurm: they end on their own
    # (a completing job leaves the queue within seconds), before anything
    # here cancels them.
    left = []

    def gone():
        left[:] = [l for l in slurm_jobs_and_steps(cluster) if l not in before]
        return not left
    try:
        loom.wait_for(gone, timeout=20, what="the test's Slurm jobs and steps to end")
    except AssertionError:
        pass
    # then clean up, so that one test's leftovers do not fail the next
    subprocess.run(["scancel", "--user=root"], env=cluster.env, capture_output=True)
    loom.wait_for(lambda: not slurm_jobs_and_steps(cluster), timeout=20, what="Slurm queue empty")
    assert not left, f"Slurm jobs/steps outlived the test: {left}"


# A stand-in for srun, first on the coordinator's PATH: the first N launches
# of the loom agents named in LOOM_TEST_SRUN_FAIL ("worker:1=1 chief:0=2")
# fail the way a step launch refused by a slurmd does (the messages and the
# exit status 226, ESLURM_INVALID_NODE_NAME, that srun gave on this
# one-machine cluster), starting nothing; every call of the real srun is
# counted per task in LOOM_TEST_SRUN_DIR; anything else goes to the real srun.
FAKE_SRUN = r"""#!/bin/sh
name=; last=
for a in "$@"; do
  case $a in --job-name=*) name=${a#--job-name=} ;; esac
  last=$a
done
if [ "$last" = agent ] && [ -n "$name" ]; then
  f="$LOOM_TEST_SRUN_DIR/$(echo "$name" | tr : -)"
  tries=$(cat "$f" 2>/dev/null || echo 0)
  echo $((tries + 1)) > "$f"
  for rule in $LOOM_TEST_SRUN_FAIL; do
    if [ "${rule%=*}" = "$name" ] && [ "$tries" -lt "${rule##*=}" ]; then
      echo "srun: error: Task launch for StepId=$SLURM_JOB_ID.$tries failed on node n3: Invalid node name specified" >&2
      echo "srun: error: Application launch failed: Invalid node name specified" >&2
      exit 226
    fi
  done
fi
exec REAL_SRUN "$@"
"""


def fake_srun(sloom, tmp_path, fail):
    """Puts FAKE_SRUN first on the job's PATH; returns its count directory."""
    bindir, counts = tmp_path / "fakebin", tmp_path / "srun-calls"
    bindir.mkdir()
    counts.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN.replace("REAL_SRUN", shutil.which("srun")))
    (bindir / "srun").chmod(0o755)
    sloom.env.update(PATH=f"{bindir}:{sloom.env['PATH']}", LOOM_TEST_SRUN_FAIL=fail,
                     LOOM_TEST_SRUN_DIR=str(counts))
    return counts


def launches(counts):
    return {f.name.replace("-", ":", 1): int(f.read_text()) for f in counts.iterdir()}


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


def test_retry_inside_the_allocation(sloom, cluster):
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
    # a task's own failure is never mistaken for a refused launch
    assert not [e for e in sloom.events() if e["event"] == "launch_retry"]


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
    sloom.wait_running(timeout=30, what="running in Slurm")
    st = sloom.run("status", job)
    assert "running" in st.stdout
    sloom.wait_for(lambda: "tick 2" in sloom.run("logs", job, "--task", "worker:1").stdout,
                   timeout=30, what="worker:1's third line in loom logs")
    k = sloom.run("kill", job, timeout=30)
    assert k.returncode == 0, k.stderr
    assert sloom.state()["state"] == "killed"
    sloom.wait_for(lambda: squeue(cluster).strip() == "", timeout=20, what="Slurm job gone")


def test_a_job_slurm_cancels_leaves_no_copy_on_the_nodes(sloom, cluster, tmp_path):
    """scancel ends the job (as the time limit or a preemption would) before
    the coordinator can remove the node-local copies of loom and the spec's
    files, since no step starts in an ending job: the last agent out on
    each node, which Slurm signalled, removes them."""
    (tmp_path / "in.txt").write_text("staged\n")
    sloom.env["LOOM_SLURM_FILES"] = "sbcast"
    spec = sloom.spec(f"""
name: cancelled
backend: slurm
files: {{in.txt: {tmp_path / "in.txt"}}}
roles:
  worker: {{instances: 3, command: 'cat in.txt; sleep 300'}}
""")
    p = sloom.popen("run", spec)
    try:
        sloom.wait_running(timeout=90)
        ids = subprocess.run(["squeue", "-h", "-n", sloom.job_dir().name, "-o", "%i"],
                             env=cluster.env,
                             capture_output=True, text=True, check=True).stdout.split()
        assert len(ids) == 1 and ids[0].isdigit(), ids
        exe, files = Path(f"/tmp/loom-{ids[0]}"), Path(f"/tmp/loom-files-{ids[0]}")
        # the agents run the node's copy, and the file is the node's copy
        agents = [pid for pid in loom_pids_of(sloom.home)
                  if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"agent"]]
        assert len(agents) == 3, agents
        assert {os.readlink(f"/proc/{pid}/exe") for pid in agents} == {str(exe / "loom")}
        assert files.is_dir() and any(files.iterdir())
        subprocess.run(["scancel", ids[0]], env=cluster.env, check=True, timeout=20)
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0, err
    sloom.wait_for(lambda: not exe.exists() and not files.exists(), timeout=30,
                   what=f"{exe} and {files} to be removed")
    sloom.wait_for(lambda: not loom_pids_of(sloom.home), timeout=30, what="no process of the job")


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
    sloom.wait_for(lambda: "RUNNING" in squeue(cluster), timeout=30, what="the hog running")
    r = sloom.run("submit", spec, timeout=30)
    assert r.returncode == 0
    job = r.stdout.strip()
    sloom.wait_for(lambda: "PENDING" in squeue(cluster), timeout=30, what="the job pending")
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
    # refused before submission, with what it asks against what Slurm has
    assert "role 'worker' asks for 64 vcores" in r.stderr, r.stderr
    assert "its largest node has 4 CPUs" in r.stderr, r.stderr
    assert squeue(cluster).strip() == ""


RAN = 'echo "ran $LOOM_TASK attempt=$LOOM_ATTEMPT rank=$RANK node=$SLURMD_NODENAME"'


def ran_lines(out):
    return sorted(l.split("] ", 1)[1] for l in out.splitlines() if "] ran " in l)


def test_many_tasks_launched_at_once_all_run(sloom, cluster):
    # 8 agents started together, one srun (one job step) each, over all three
    # nodes: every task runs exactly once, in the first attempt
    spec = sloom.spec(f"""
name: smany
backend: slurm
roles:
  chief: {{command: '{RAN}'}}
  worker: {{instances: 7, command: '{RAN}'}}
""")
    t0 = time.time()
    r = sloom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = ran_lines(r.stdout)
    names = [l.split()[1] for l in ran]
    assert sorted(names) == sorted(["chief:0"] + [f"worker:{i}" for i in range(7)]), ran
    assert all("attempt=0" in l for l in ran), ran
    assert sorted(int(l.split("rank=")[1].split()[0]) for l in ran) == list(range(8))
    assert {l.split("node=")[1] for l in ran} == set(cluster.nodes)
    ev = sloom.events()
    registered = sorted(e["task"] for e in ev if e["event"] == "registered")
    assert registered == sorted(names)
    st = sloom.state()
    assert st["state"] == "succeeded" and st["attempt"] == 0
    print(f"8 tasks in {time.time() - t0:.1f}s, launch retries: "
          f"{[e['task'] for e in ev if e['event'] == 'launch_retry']}")


def test_refused_step_launches_are_launched_again(sloom, cluster, tmp_path):
    # Slurm refuses some step launches (srun exits 226 before the agent
    # starts): those tasks are launched again, after 0.5 s then 1 s, and the
    # job runs as if nothing happened; each task's command runs once
    counts = fake_srun(sloom, tmp_path, "chief:0=1 worker:1=1 worker:4=2")
    spec = sloom.spec(f"""
name: srefused
backend: slurm
roles:
  chief: {{command: '{RAN}'}}
  worker: {{instances: 5, command: '{RAN}'}}
""")
    r = sloom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = ran_lines(r.stdout)
    assert sorted(l.split()[1] for l in ran) == ["chief:0"] + [f"worker:{i}" for i in range(5)]
    assert all("attempt=0" in l for l in ran), ran
    ev = sloom.events()
    retries = [e for e in ev if e["event"] == "launch_retry"]
    assert sorted((e["task"], e["retry"], e["delay_s"]) for e in retries) == [
        ("chief:0", 1, 0.5), ("worker:1", 1, 0.5), ("worker:4", 1, 0.5), ("worker:4", 2, 1.0)]
    for e in retries:
        assert e["exit_code"] == 226 and e["attempt"] == 0, e
        assert "failed on node n3: Invalid node name specified" in e["reason"], e
    assert launches(counts) == {"chief:0": 2, "worker:0": 1, "worker:1": 2, "worker:2": 1,
                                "worker:3": 1, "worker:4": 3}
    assert not [e for e in ev if e["event"] in ("failed", "lost", "attempt_failed")]
    assert sloom.state()["state"] == "succeeded" and sloom.state()["attempt"] == 0
    log = (sloom.job_dir() / "coordinator.log").read_text()
    assert "srun[worker:4]: srun: error: Task launch for StepId=" in log, log
    assert "worker:4: its launch failed before the agent registered" in log, log


def test_launch_refused_every_time_gives_up(sloom, cluster, tmp_path):
    # a launch that never works is tried 1 + LOOM_LAUNCH_RETRIES (3) times,
    # then the task is lost and the job fails, naming srun's error
    counts = fake_srun(sloom, tmp_path, "worker:1=1000")
    spec = sloom.spec("""
name: snever
backend: slurm
roles:
  worker: {instances: 2, command: 'sleep 30'}
""")
    t0 = time.time()
    r = sloom.run("run", spec, timeout=120)
    took = time.time() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert "root cause: worker:1" in r.stderr, r.stderr
    assert ("never started: srun exited with status 226 before the agent registered, on each of "
            "4 launches: srun: error: Task launch for StepId=") in r.stderr, r.stderr
    assert "Invalid node name specified" in r.stderr
    assert launches(counts) == {"worker:0": 1, "worker:1": 4}
    ev = sloom.events()
    assert [(e["retry"], e["delay_s"]) for e in ev if e["event"] == "launch_retry"] == [
        (1, 0.5), (2, 1.0), (3, 2.0)]
    assert [e["task"] for e in ev if e["event"] == "lost"] == ["worker:1"]
    # the healthy task was stopped, not left running; 3.5 s of pauses
    assert [e["task"] for e in ev if e["event"] == "stopped"] == ["worker:0"]
    assert took < 60, took


def test_pending_reason_is_shown_and_refreshed(sloom, cluster, tmp_path):
    # a job that must wait behind another: loom run and loom status say
    # Slurm's reason, asked again each time, until the job runs
    hog = subprocess.run(["sbatch", "--parsable", "-n3", "--cpus-per-task=4", "-o",
                          str(tmp_path / "hog.out"), "--wrap", "sleep 120"], env=cluster.env,
                         capture_output=True, text=True)
    assert hog.returncode == 0, hog.stderr
    hog_id = hog.stdout.strip()
    sloom.wait_for(lambda: "RUNNING" in squeue(cluster), timeout=30, what="the hog running")
    spec = sloom.spec("""
name: waiter
backend: slurm
roles:
  worker: {vcores: 4, command: 'echo "ran $LOOM_TASK"; sleep 3'}
""")
    errf = tmp_path / "run.err"
    with open(errf, "w") as ef:
        p = subprocess.Popen([str(LOOM), "run", str(spec)], env=sloom.env, stdout=subprocess.PIPE,
                             stderr=ef, text=True, start_new_session=True)
    try:
        sloom.wait_for(lambda: any(j.name.startswith("waiter-") for j in sloom.jobs()) and
                       "PENDING" in squeue(cluster), timeout=30, what="the waiter pending")
        waiter = next(j.name for j in sloom.jobs() if j.name.startswith("waiter-"))
        sloom.wait_for(lambda: re.search(r"state\s+pending \(Resources\)",
                                         sloom.run("status", waiter).stdout),
                       timeout=30, what="status: pending (Resources)")
        st = sloom.run("status", waiter)
        assert "is PENDING (Resources: waiting for nodes to free up)" in st.stdout, st.stdout
        listing = sloom.run("status").stdout
        assert re.search(waiter + r"\s+pending \(Resources\)", listing), listing
        # a third job waits behind the waiter: Slurm says Priority for it
        third = sloom.run("submit", sloom.spec(spec.read_text().replace("waiter", "third"),
                                               name="third.yaml"), timeout=30)
        assert third.returncode == 0, third.stderr
        sloom.wait_for(lambda: re.search(r"state\s+pending \(Priority\)",
                                         sloom.run("status", third.stdout.strip()).stdout),
                       timeout=30, what="status: pending (Priority)")
        # loom run says it again, with the time waited, while nothing changes
        sloom.wait_for(lambda: re.search(r"is PENDING \(Resources.*waiting \d+s$",
                                         errf.read_text(), re.M),
                       timeout=30, what="loom run repeating the pending reason")
        subprocess.run(["scancel", hog_id], env=cluster.env, check=True)
        out, _ = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    err = errf.read_text()
    assert p.returncode == 0, out + err
    assert "[worker:0] ran worker:0" in out
    said = [l for l in err.splitlines() if "is PENDING" in l]
    assert any("is PENDING (Resources: waiting for nodes to free up)" in l for l in said), err
    assert any(re.search(r"waiting \d+s$", l) for l in said), err
    # then it ran: a later line says so, and status follows
    assert err.index("is PENDING") < err.index("is RUNNING"), err
    assert re.search(r"state\s+succeeded", sloom.run("status", waiter).stdout)


def test_the_secret_is_not_in_what_slurm_shows(sloom, cluster):
    """Slurm's listings of the job (scontrol show job -d, its steps, squeue
    with every field, the batch script it keeps) and `ps` on the node hold
    no part of the job secret (issue 17.3)."""
    from test_security import job_files, leaks, loom_ps_lines, secret_of
    spec = sloom.spec("""
name: ssecret
backend: slurm
roles:
  chief: {command: 'sleep 4'}
  worker: {instances: 2, command: 'sleep 4'}
""")
    r = sloom.run("submit", spec, timeout=30)
    assert r.returncode == 0, r.stderr
    jd = sloom.job_dir()
    secret = secret_of(jd)
    sloom.wait_running(timeout=30, what="running in Slurm")
    ids = subprocess.run(["squeue", "-h", "-o", "%A"], env=cluster.env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert ids, "the job is not in Slurm's queue"

    def slurm(*args):
        r = subprocess.run(list(args), env=cluster.env, capture_output=True, text=True)
        assert r.returncode == 0, (args, r.stderr)
        return (" ".join(args), r.stdout)
    seen = [slurm("squeue", "-o", "%all"), slurm("squeue", "-s", "-o", "%all"),
            slurm("scontrol", "show", "steps")]
    for i in ids:
        seen += [slurm("scontrol", "show", "job", "-d", i)]
    first = min(ids, key=int)  # a heterogeneous job's leader holds the script
    seen += [slurm("scontrol", "write", "batch_script", first, "-")]
    assert any("sleep 4" in t or "loom" in t for _, t in seen[-1:]), seen[-1]
    seen += loom_ps_lines()
    sloom.wait_for(lambda: sloom.state()["state"] == "succeeded", timeout=60,
                   what="the job to succeed")
    seen += job_files(jd)
    assert not leaks(secret, seen)


# ---- the loom build hidden from the nodes (issue 31) ---------------------------

def build_probe(builds):
    """A task's shell command: exit 3 if it sees a loom binary in one of
    builds, else a line "LS DIR [ENTRIES]" for each and "CHAIN EXE..."
    (the executable of the shell and of each of its ancestors)."""
    return (f"for d in {' '.join(map(str, builds))}; do "
            "if test -e $d/loom; then echo SEEN $d/loom; exit 3; fi; "
            "echo \"LS $d [$(ls -A $d | tr '\\n' ' ')]\"; done; "
            "p=$$; chain=; while [ \"$p\" -gt 1 ]; do "
            "chain=\"$chain $(readlink /proc/$p/exe)\"; "
            "p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2); done; "
            "echo \"CHAIN$chain\"")


@pytest.fixture(scope="module")
def hidden_cluster(tmp_path_factory):
    """A Slurm cluster of 2 nodes whose slurmds see the loom build
    directories empty (SlurmCluster(hide_builds=True))."""
    c = SlurmCluster(tmp_path_factory.mktemp("slurm-hidden"), nodes=("h1", "h2"), cpus=2,
                     hide_builds=True).start()
    try:
        yield c
    finally:
        c.stop()


def test_the_nodes_of_a_hidden_cluster_see_no_loom_build(hidden_cluster):
    """The hiding is real: a job step on each node (started by its slurmd)
    finds every build directory empty and no loom in it, while the
    checkout's python/ is there; each slurmd's own view (/proc/PID/root)
    is as empty, and this process still sees the build."""
    c = hidden_cluster
    builds = [b for b in c.hidden if b.is_dir()]  # another /tmp/build-* may have gone
    assert BUILD.resolve() in builds and LOOM.exists(), (builds, LOOM)
    r = subprocess.run(["srun", "-N2", "--ntasks-per-node=1", "--label", "sh", "-c",
                        build_probe(builds) + f"; test -f {ROOT}/python/loom/__init__.py && "
                        "echo PYTHON ok $SLURMD_NODENAME"],
                       env=c.env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SEEN" not in r.stdout, r.stdout + r.stderr
    for i in (0, 1):
        for b in builds:
            assert f"{i}: LS {b} []" in r.stdout, (i, b, r.stdout)
        assert re.search(rf"^{i}: PYTHON ok h[12]$", r.stdout, re.M), r.stdout
        chain = re.findall(rf"^{i}: CHAIN (.*)$", r.stdout, re.M)
        assert len(chain) == 1 and "slurmstepd" in chain[0], r.stdout
        assert not [e for e in chain[0].split() for b in builds if hidden._under(e, b)], chain
    slurmds = [p for p in c.procs if "slurmd" in p.args]
    assert len(slurmds) == 2, [p.args for p in c.procs]
    for p in slurmds:
        assert "slurmd" in os.path.basename(os.readlink(f"/proc/{p.pid}/exe"))
        for b in builds:
            assert os.listdir(f"/proc/{p.pid}/root{b}") == [], (p.pid, b)


def test_a_job_runs_the_shipped_binary_with_the_build_hidden(loom, hidden_cluster):
    """On nodes that see no loom build, a job runs: each task finds no
    loom in a build directory, and its agent's executable (an ancestor
    of the task) is the copy the backend shipped, under none of them."""
    c = hidden_cluster
    builds = [b for b in c.hidden if b.is_dir()]  # another /tmp/build-* may have gone
    loom.env.update(SLURM_CONF=str(c.conf))
    spec = loom.spec(f"""
name: hidden
backend: slurm
roles:
  worker: {{instances: 2, command: {json.dumps(build_probe(builds))}}}
""")
    try:
        r = loom.run("run", spec, timeout=60)
    finally:
        subprocess.run(["scancel", "--user=root"], env=c.env, capture_output=True, timeout=20)
    logs = [f.read_text(errors="replace")[-2000:] for f in loom.home.glob("jobs/*/coordinator.log")]
    assert r.returncode == 0 and "SEEN" not in r.stdout, (r.stdout, r.stderr, logs)
    for i in (0, 1):
        for b in builds:
            assert f"[worker:{i}] LS {b} []" in r.stdout, (i, b, r.stdout)
        chain = re.findall(rf"^\[worker:{i}\] CHAIN (.*)$", r.stdout, re.M)
        assert len(chain) == 1, r.stdout
        exes = chain[0].split()
        assert [e for e in exes if e.endswith("/loom")], exes
        assert not [e for e in exes for b in builds if hidden._under(e, b)], (exes, builds)
