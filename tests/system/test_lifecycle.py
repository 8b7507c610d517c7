"""Nothing outlives a job: interrupts, SIGKILL of the coordinator, submit
and kill, two jobs at once."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import loom_pids_of

LONG = """
name: {name}
roles:
  chief: {{command: 'exec sleep 120'}}
  worker: {{instances: 2, procs: 2, command: 'sleep 120 & sleep 120; wait'}}
  ps: {{command: 'exec sleep 120'}}
"""


def running(loom, jd=None):
    try:
        st = loom.state(jd)
    except (FileNotFoundError, ValueError, AssertionError):
        return False
    return all(t["state"] == "running" and t.get("pids") for t in st["tasks"])


def user_pids(loom, jd=None):
    return [p for t in loom.state(jd)["tasks"] for p in t.get("pids", [])]


def test_sigint_stops_the_job_and_exits_130(loom):
    p = loom.popen("run", loom.spec(LONG.format(name="intr")))
    loom.wait_for(lambda: loom.jobs() and running(loom), what="job running")
    pids = user_pids(loom)
    assert len(pids) == 6
    t0 = time.time()
    os.kill(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=15)
    assert p.returncode == 130, err
    assert time.time() - t0 < 5
    assert "interrupted" in err
    assert loom_pids_of(loom.home) == []
    assert loom.state()["state"] == "killed"


def test_sigterm_exits_130(loom):
    p = loom.popen("run", loom.spec(LONG.format(name="term")))
    loom.wait_for(lambda: loom.jobs() and running(loom), what="job running")
    os.kill(p.pid, signal.SIGTERM)
    p.communicate(timeout=15)
    assert p.returncode == 130
    assert loom_pids_of(loom.home) == []


def test_sigkill_of_loom_run_leaves_nothing_within_5s(loom):
    p = loom.popen("run", loom.spec(LONG.format(name="kill9")))
    loom.wait_for(lambda: loom.jobs() and running(loom), what="job running")
    assert len(loom_pids_of(loom.home)) >= 1 + 4 + 6
    t0 = time.time()
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=5)
    loom.wait_for(lambda: loom_pids_of(loom.home) == [], timeout=5, what="all job processes gone")
    assert time.time() - t0 < 5
    st = loom.run("status", loom.job_dir().name)
    assert "lost (coordinator gone)" in st.stdout


def test_submit_status_logs_follow_kill(loom):
    spec = loom.spec("""
name: detached
roles:
  worker: {instances: 2, command: 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.1; done'}
""")
    r = loom.run("submit", spec, timeout=20)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.startswith("detached-")
    loom.wait_for(lambda: running(loom), what="job running")
    st = loom.run("status", job)
    assert "running" in st.stdout and "worker:1" in st.stdout
    f = loom.popen("logs", job, "--task", "worker:0", "--follow")
    time.sleep(1.0)
    k = loom.run("kill", job, timeout=20)
    assert k.returncode == 0 and "killed" in k.stdout, k.stderr
    out, _ = f.communicate(timeout=10)  # --follow ends with the job
    assert "tick 3" in out
    assert loom.state()["state"] == "killed"
    assert loom_pids_of(loom.home) == []
    assert loom.run("kill", job).returncode == 0  # idempotent


def test_submitted_coordinator_sigkill_leaves_nothing(loom):
    r = loom.run("submit", loom.spec(LONG.format(name="subkill")), timeout=20)
    assert r.returncode == 0
    loom.wait_for(lambda: running(loom), what="job running")
    coord = loom.state()["coordinator"]["pid"]
    os.kill(coord, signal.SIGKILL)
    loom.wait_for(lambda: loom_pids_of(loom.home) == [], timeout=5, what="all job processes gone")


def test_two_jobs_at_once(loom):
    spec = loom.spec("""
name: twin
roles:
  chief: {command: 'sleep 1; echo $MASTER_PORT'}
  worker: {instances: 2, command: 'sleep 1; echo $MASTER_PORT'}
""")
    a, b = loom.popen("run", spec), loom.popen("run", spec)
    oa, ea = a.communicate(timeout=30)
    ob, eb = b.communicate(timeout=30)
    assert a.returncode == 0 and b.returncode == 0, ea + eb
    jobs = loom.jobs()
    assert len(jobs) == 2 and jobs[0] != jobs[1]
    pa = {l.split()[-1] for l in oa.splitlines()}
    pb = {l.split()[-1] for l in ob.splitlines()}
    assert len(pa) == 1 and len(pb) == 1 and pa != pb


def test_each_task_has_a_tmpdir_that_goes_with_it(loom, tmp_path):
    """Each start of a task gets a TMPDIR of its own (loom-task-<role>-<index>-*),
    removed when the task ends, however it ends: here one task leaves files
    there and exits, another is SIGKILLed (itself) with files there and
    restarted once; a spec that sets TMPDIR keeps it."""
    own = tmp_path / "own-tmp"
    own.mkdir()
    spec = loom.spec(f"""
name: tmpdirs
restart: task
max_restarts: 1
roles:
  chief: {{command: 'echo "T=$TMPDIR"; mkdir -p $TMPDIR/a/b && echo x > $TMPDIR/a/b/f'}}
  worker: {{command: 'echo "T=$TMPDIR"; echo y > $TMPDIR/g; if [ "$LOOM_ATTEMPT" = 0 ] && [ ! -e {tmp_path}/killed ]; then touch {tmp_path}/killed; kill -9 $$; fi'}}
  keeper: {{env: {{TMPDIR: "{own}"}}, command: 'echo "T=$TMPDIR"; echo z > $TMPDIR/h'}}
""")
    # what a SIGKILLed agent (its pid gone) left in the same place is
    # removed by the next agent; an agent that lives keeps its own
    base = Path(os.environ.get("TMPDIR") or "/tmp")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = base / f"loom-task-worker-7-{dead.pid}-AbCdEf"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "f").write_text("left")
    live = base / f"loom-task-worker-8-{os.getpid()}-AbCdEf"
    live.mkdir()
    try:
        r = loom.run("run", spec)
        assert not stale.exists(), "a dead agent's TMPDIR was not removed"
        assert live.exists(), "a live agent's TMPDIR was removed"
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {}
    for line in r.stdout.splitlines():
        if "] T=" in line:
            task, path = line.split("] T=")
            seen.setdefault(task.lstrip("["), []).append(path)
    assert sorted(seen) == ["chief:0", "keeper:0", "worker:0"], r.stdout
    assert len(seen["worker:0"]) == 2 and len(set(seen["worker:0"])) == 2, seen  # one per start
    for task, paths in seen.items():
        for p in paths:
            if task == "keeper:0":
                assert p == str(own) and (own / "h").read_text() == "z\n"
            else:
                name = task.replace(":", "-")
                assert os.path.basename(p).startswith(f"loom-task-{name}-"), p
                assert os.path.dirname(p) == str(base), p
                assert not os.path.exists(p), f"{task}'s TMPDIR {p} outlived it"


def _proc(pid):
    """(state, ppid, session, command line) of a live process; None once it
    is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    f = stat.rsplit(")", 1)[1].split()
    return None if f[0] in ("Z", "X") else (f[0], int(f[1]), int(f[3]), cmd)


def test_sigkill_of_a_task_s_agent_ends_what_the_task_started(loom, tmp_path):
    """A task's agent SIGKILLed (a cluster manager's kill, a lost host):
    the task's first process dies with it (its parent-death signal) and so,
    within seconds, does everything that process started in the task's
    session, here a shell's `sleep &` and a process that left for a process
    group of its own (which the coordinator's kill of the task's process
    group on this host misses): the guard `loom __exec` leaves in the
    session kills them. The task is lost, the job fails (retries 0)."""
    bg, own = tmp_path / "bg.pid", tmp_path / "own.pid"
    setpgid = tmp_path / "setpgid.py"
    setpgid.write_text('import os\nos.setpgid(0, 0)\nos.execvp("sleep", ["sleep", "301"])\n')
    p = loom.popen("run", loom.spec(f"""
name: agentkill
retries: 0
roles:
  worker: {{command: 'sleep 300 & echo $! > {bg}; {sys.executable} {setpgid} & echo $! > {own}; wait'}}
"""))
    try:
        loom.wait_for(lambda: running(loom) and all(f.exists() and f.read_text().strip()
                                                    for f in (bg, own)),
                      what="the task and its background processes running")
        sleep, other = int(bg.read_text()), int(own.read_text())
        task = user_pids(loom)[0]
        agent = _proc(task)[1]
        assert _proc(agent)[3][1:2] == [b"agent"], _proc(agent)
        loom.wait_for(lambda: _proc(other)[3][:2] == [b"sleep", b"301"], what="setpgid and exec")
        assert _proc(sleep)[2] == _proc(other)[2] == task  # the task's session, not the agent's
        assert os.getpgid(other) == other != os.getpgid(sleep) == task
        guards = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and
                  (_proc(int(d.name)) or (0, 0, 0, []))[2:] == (task, [b"loom", b"__exec",
                                                                       b"--guarding", b"3", b""])]
        assert len(guards) == 1, "no guard in the task's session"
        os.kill(agent, signal.SIGKILL)
        loom.wait_for(lambda: _proc(sleep) is None and _proc(other) is None, timeout=5,
                      what="the task's background processes gone")
        loom.wait_for(lambda: _proc(guards[0]) is None, timeout=5, what="the guard gone")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 1, out + err
        assert loom.state()["state"] == "failed"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=10)
        for f in (bg, own):  # what a failure leaves
            try:
                os.kill(int(f.read_text()), signal.SIGKILL)
            except (OSError, ValueError):
                pass
