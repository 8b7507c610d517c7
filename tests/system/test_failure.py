"""Failures: the first failure stops the attempt within 2 seconds, retries
restart the whole job, and the summary names the root cause."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import loom_pids_of, parse_status


def stop_latency(loom, failed_task):
    """Seconds from the failed task's exit to the last other task stopping."""
    ev = loom.events()
    t_fail = next(e["t"] for e in ev if e["event"] == "failed" and e["task"] == failed_task)
    t_stop = max(e["t"] for e in ev if e["event"] in ("stopped", "attempt_finished"))
    return t_stop - t_fail


def test_exit_code_failure_stops_others_fast(loom):
    spec = loom.spec("""
name: fail
roles:
  chief: {command: 'sleep 60'}
  worker:
    instances: 3
    command: 'if [ $LOOM_INDEX = 1 ]; then sleep 0.5; for i in $(seq 1 30); do echo "line $i" >&2; done; exit 3; fi; exec sleep 60'
  ps: {command: 'sleep 60'}
""")
    t0 = time.time()
    r = loom.run("run", spec, timeout=30)
    took = time.time() - t0
    assert r.returncode == 1, r.stderr
    assert took < 6, took
    err = r.stderr
    assert "root cause: worker:1" in err and "exited with code 3" in err
    # the last 20 lines of its stderr, not more
    assert "| line 30" in err and "| line 11" in err and "| line 10" not in err
    assert stop_latency(loom, "worker:1") < 2.0
    st = loom.state()
    assert st["state"] == "failed" and st["exit_status"] == 1
    assert st["root_cause"]["task"] == "worker:1"
    by = {t["task"]: t for t in st["tasks"]}
    assert by["worker:1"]["state"] == "failed" and by["worker:1"]["exit_code"] == 3
    assert all(by[t]["state"] == "stopped" for t in ("chief:0", "worker:0", "worker:2", "ps:0"))
    # loom status: every line, every task in spec order, the root cause
    s = loom.run("status", loom.job_dir().name)
    assert s.returncode == 0, s.stderr
    head, rows = parse_status(s.stdout)
    assert (head["state"], head["attempt"], head["cause"]) == \
        ("failed", "0 (retries 0)", "worker:1: exited with code 3"), s.stdout
    assert list(head) == ["job", "state", "attempt", "elapsed", "dir", "web", "cause"], s.stdout
    assert [(r["TASK"], r["STATE"], r["ATTEMPT"], r["EXIT"], r["REASON"]) for r in rows] == [
        ("chief:0", "stopped", "0", "SIGTERM", ""), ("worker:0", "stopped", "0", "SIGTERM", ""),
        ("worker:1", "failed", "0", "3", ""), ("worker:2", "stopped", "0", "SIGTERM", ""),
        ("ps:0", "stopped", "0", "SIGTERM", "")], s.stdout


def test_killed_by_signal_is_named(loom):
    spec = loom.spec("""
name: sig
roles:
  worker: {instances: 2, command: 'if [ $LOOM_INDEX = 0 ]; then sleep 0.3; kill -SEGV $$; fi; exec sleep 60'}
""")
    r = loom.run("run", spec, timeout=30)
    assert r.returncode == 1
    assert "worker:0" in r.stderr and "SIGSEGV" in r.stderr
    by = {t["task"]: t for t in loom.state()["tasks"]}
    assert by["worker:0"]["signal"] == signal.SIGSEGV


def test_command_not_found(loom):
    spec = loom.spec("""
name: notfound
roles:
  chief: {command: 'sleep 60'}
  worker: {command: ./no-such-binary --flag}
""")
    t0 = time.time()
    r = loom.run("run", spec, timeout=30)
    assert r.returncode == 1
    assert time.time() - t0 < 5
    assert "worker:0" in r.stderr and "command not found" in r.stderr
    assert "no-such-binary" in r.stderr
    spec = loom.spec("name: nf2\nroles:\n  worker: {command: [definitely-not-a-command-xyz]}\n")
    r = loom.run("run", spec, timeout=30)
    assert r.returncode == 1 and "command not found" in r.stderr


def test_retries_restart_the_job_with_attempt_incremented(loom, tmp_path):
    marker = tmp_path / "attempts.txt"
    spec = loom.spec(f"""
name: retry
retries: 2
roles:
  chief: {{command: 'echo $LOOM_ATTEMPT >> {marker}; sleep 0.2'}}
  worker: {{command: 'if [ $LOOM_ATTEMPT -lt 2 ]; then sleep 0.5; exit 7; fi; echo done at $LOOM_ATTEMPT'}}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[worker:0] done at 2" in r.stdout
    assert "retrying the job: attempt 2 of 3" in r.stderr
    assert marker.read_text().split() == ["0", "1", "2"]
    st = loom.state()
    assert st["attempt"] == 2 and st["state"] == "succeeded"
    fails = [e for e in loom.events() if e["event"] == "failed"]
    assert [(e["task"], e["attempt"], e["exit_code"]) for e in fails] == \
        [("worker:0", 0, 7), ("worker:0", 1, 7)]
    log = (loom.job_dir() / "logs/worker-0.log").read_text()
    assert "attempt 0" in log and "attempt 1" in log and "attempt 2" in log
    s = loom.run("status", loom.job_dir().name)
    head, rows = parse_status(s.stdout)
    assert (head["state"], head["attempt"]) == ("succeeded", "2 (retries 2)") and \
        "cause" not in head, s.stdout
    assert [(r["TASK"], r["STATE"], r["ATTEMPT"], r["EXIT"]) for r in rows] == \
        [("chief:0", "succeeded", "2", "0"), ("worker:0", "succeeded", "2", "0")], s.stdout


def test_retries_exhausted_exit_1(loom):
    spec = loom.spec("name: retry2\nretries: 1\nroles:\n  worker: {command: 'exit 4'}\n")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1
    assert "attempt 2 of 2" in r.stderr and "exited with code 4" in r.stderr


def test_agent_lost(loom):
    spec = loom.spec("""
name: lost
roles:
  worker: {instances: 2, command: 'exec sleep 60'}
""")
    p = loom.popen("run", spec)
    loom.wait_running()
    time.sleep(0.3)
    agent = next(t["agent_pid"] for t in loom.state()["tasks"] if t["task"] == "worker:1")
    os.kill(agent, signal.SIGKILL)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 1, err
    assert "worker:1" in err and "agent lost" in err
    # the dead agent's user process died with it (parent-death signal)
    by = {t["task"]: t for t in loom.state()["tasks"]}
    assert by["worker:1"]["state"] == "lost"


def test_rendezvous_timeout_names_missing_tasks(loom):
    spec = loom.spec("""
name: rdv
roles:
  chief: {command: 'true'}
  worker: {instances: 3, command: 'true'}
""")
    t0 = time.time()
    r = loom.run("run", spec, timeout=30,
                 env={"LOOM_RENDEZVOUS_TIMEOUT": "1500", "LOOM_FAULT_STALL_TASK": "worker:2"})
    assert r.returncode == 1
    assert 1.4 < time.time() - t0 < 6
    assert "rendezvous timed out" in r.stderr
    assert "1 of 4 tasks missing: worker:2 (agent started" in r.stderr
    assert "never registered" in r.stderr
    assert "worker:0 (" not in r.stderr


MEM_RE = re.compile(r"^ok   memory limits: (cgroup v2|cgroup v1|rlimit) .*$", re.M)
LIMIT_FILE = {"cgroup v2": "memory.max", "cgroup v1": "memory.limit_in_bytes"}
# touches 400 MiB of shared anonymous memory: RLIMIT_DATA does not see it
TOUCH_MMAP = ("import mmap; m = mmap.mmap(-1, 400 << 20); "
              "[m.__setitem__(i, 1) for i in range(0, 400 << 20, 4096)]; print('touched')")
# the same once role "shown" has printed its cgroup's files
TOUCH_AFTER_SHOWN = ("import os, time; r = os.environ['LOOM_JOB_DIR'] + '/shown-ready'; "
                     "[time.sleep(0.05) for _ in range(400) if not os.path.exists(r)]; " +
                     TOUCH_MMAP)


def memory_mechanism(loom, env=None):
    """What `loom check` says enforces memory: (mechanism, its whole line)."""
    c = loom.run("check", env=env)
    assert c.returncode == 0, c.stdout + c.stderr
    m = MEM_RE.search(c.stdout)
    assert m, c.stdout
    return m.group(1), m.group(0)


def loom_cgroups(base):
    return sorted(p.name for p in Path(base).iterdir() if p.name.startswith("loom-")) \
        if base else []


def test_memory_and_vcores_are_enforced(loom):
    mech, line = memory_mechanism(loom)
    spec = loom.spec("""
name: limits
roles:
  small: {memory: 64MiB, command: [/usr/bin/python3, -c, "b = bytearray(400 * 1024 * 1024); print('allocated')"]}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1, r.stdout
    assert "allocated" not in r.stdout
    if mech == "rlimit":  # the allocation fails
        assert "MemoryError" in r.stderr and "out of memory" not in r.stderr, r.stderr
    else:  # the kernel's OOM kill is named, with the limit in force
        assert ("small:0: killed by signal 9 (SIGKILL): out of memory: the task reached its "
                f"memory limit of 64 MiB ({mech} {LIMIT_FILE[mech]})") in r.stderr, r.stderr
    spec = loom.spec("""
name: limits2
roles:
  big: {memory: 2GiB, command: [/usr/bin/python3, -c, "b = bytearray(400 * 1024 * 1024); print('allocated')"]}
  pinned: {vcores: 1, command: 'grep Cpus_allowed_list /proc/self/status'}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[big:0] allocated" in r.stdout
    line = next(l for l in r.stdout.splitlines() if "Cpus_allowed_list" in l)
    cpus = line.split()[-1]
    assert cpus.isdigit(), line  # exactly one core


def test_memory_cgroup_counts_mmap_and_is_removed(loom):
    """The cgroup in force on this machine kills a task that touches more
    than its limit through a shared mapping, names the limit, and leaves
    no cgroup behind."""
    mech, line = memory_mechanism(loom)
    if mech == "rlimit":
        pytest.skip(f"this machine gives loom no memory cgroup: {line}")
    base = line.rsplit(" under ", 1)[1].rstrip(")")
    assert line == f"ok   memory limits: {mech} ({LIMIT_FILE[mech]} under {base})"
    before = loom_cgroups(base)
    spec = loom.spec(f"""
name: mmapped
roles:
  small: {{memory: 64MiB, command: [/usr/bin/python3, -c, "{TOUCH_AFTER_SHOWN}"]}}
  shown: {{memory: 96MiB, command: ['/bin/sh', '-c',
           'cat {base}/loom-$LOOM_JOB_ID/shown-0/{LIMIT_FILE[mech]};
            touch $LOOM_JOB_DIR/shown-ready; sleep 30']}}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1, r.stdout
    assert "touched" not in r.stdout
    assert f"[shown:0] {96 << 20}" in r.stdout, r.stdout  # the limit as the kernel holds it
    assert ("root cause: small:0 (attempt 0) killed by signal 9 (SIGKILL): out of memory: the "
            f"task reached its memory limit of 64 MiB ({mech} {LIMIT_FILE[mech]})") in r.stderr, \
        r.stderr
    assert loom_cgroups(base) == before


def test_memory_rlimit_when_forced(loom):
    env = {"LOOM_CGROUP_ROOT": "none"}
    mech, line = memory_mechanism(loom, env)
    assert line == "ok   memory limits: rlimit (RLIMIT_DATA; no cgroup: LOOM_CGROUP_ROOT=none)"
    spec = loom.spec("""
name: rlimited
roles:
  small: {memory: 64MiB, command: [/usr/bin/python3, -c, "b = bytearray(400 * 1024 * 1024); print('allocated')"]}
""")
    r = loom.run("run", spec, timeout=60, env=env)
    assert r.returncode == 1, r.stdout
    assert "allocated" not in r.stdout
    assert "MemoryError" in r.stderr and "out of memory" not in r.stderr, r.stderr
    # what the rlimit cannot see: shared memory (README says so)
    spec = loom.spec(f"""
name: rlimited2
roles:
  small: {{memory: 64MiB, command: [/usr/bin/python3, -c, "{TOUCH_MMAP}"]}}
""")
    r = loom.run("run", spec, timeout=60, env=env)
    assert r.returncode == 0 and "[small:0] touched" in r.stdout, r.stderr


@pytest.fixture
def own_cgroup2(tmp_path):
    """A cgroup2 mount of the test's own with a child cgroup for loom, or a
    skip where this machine does not allow one."""
    if os.geteuid() != 0:
        pytest.skip("mounting cgroup2 needs root")
    mnt = tmp_path / "cgroup2"
    mnt.mkdir()
    m = subprocess.run(["mount", "-t", "cgroup2", "none", str(mnt)], capture_output=True,
                       text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount cgroup2: {m.stderr.strip()}")
    base = mnt / f"loom-test-{os.getpid()}"
    try:
        yield mnt, base
    finally:
        for d in sorted(base.glob("**/"), key=lambda p: -len(p.parts)) if base.exists() else []:
            try:
                d.rmdir()
            except OSError:
                pass
        subprocess.run(["umount", str(mnt)], check=False)


def test_memory_cgroup_v2_of_our_own(loom, own_cgroup2):
    mnt, base = own_cgroup2
    env = {"LOOM_CGROUP_ROOT": str(base)}
    controllers = (mnt / "cgroup.controllers").read_text().split()
    if "memory" not in controllers:
        # this kernel's memory controller is bound to a cgroup v1 hierarchy:
        # loom says so and falls back to the rlimit
        base.mkdir()
        mech, line = memory_mechanism(loom, env)
        assert line == ("ok   memory limits: rlimit (RLIMIT_DATA; no cgroup: cgroup v2 at "
                        f"{base} has no memory controller)")
        pytest.skip(f"cgroup2 here has no memory controller (only {controllers}): "
                    "the fallback is checked, enforcement is not")
    subtree = (mnt / "cgroup.subtree_control").read_text().split()
    if "memory" not in subtree:
        (mnt / "cgroup.subtree_control").write_text("+memory")
    base.mkdir()
    mech, line = memory_mechanism(loom, env)
    assert line == f"ok   memory limits: cgroup v2 (memory.max under {base})"
    cpuset = "cpuset" in (base / "cgroup.controllers").read_text().split()
    spec = loom.spec(f"""
name: v2
roles:
  small: {{memory: 64MiB, command: [/usr/bin/python3, -c, "{TOUCH_AFTER_SHOWN}"]}}
  shown: {{memory: 96MiB, vcores: 1, command: ['/bin/sh', '-c',
           'cd {base}/loom-$LOOM_JOB_ID/shown-0 && cat memory.max && cat cpuset.cpus;
            touch $LOOM_JOB_DIR/shown-ready; sleep 30']}}
""")
    r = loom.run("run", spec, timeout=60, env=env)
    assert r.returncode == 1, r.stdout
    assert "touched" not in r.stdout
    assert f"[shown:0] {96 << 20}" in r.stdout, r.stdout
    if cpuset:
        line = [l for l in r.stdout.splitlines() if l.startswith("[shown:0]")][-1]
        assert line.split()[-1].isdigit(), r.stdout  # one core
    assert ("root cause: small:0 (attempt 0) killed by signal 9 (SIGKILL): out of memory: the "
            "task reached its memory limit of 64 MiB (cgroup v2 memory.max)") in r.stderr, r.stderr
    assert loom_cgroups(base) == []


def test_a_held_port_and_a_plain_bind(loom):
    """The agent holds a task's port until the task listens: a bind with
    SO_REUSEADDR gets it, a plain bind gets 'Address already in use' and
    the agent says why and what to do; LOOM_PORT_HOLD=start lets the port
    go before the command starts (the plain bind then works)."""
    bind = ("python3 -c 'import os, socket; s = socket.socket(); {opt}"
            "s.bind((os.environ[\"LOOM_HOST\"], int(os.environ[\"LOOM_PORT\"]))); s.listen(); "
            "print(\"bound\", s.getsockname()[1])'")

    def job(name, opt):
        cmd = bind.format(opt=opt).replace('"', '\\"')
        return loom.spec(f'name: {name}\nroles:\n  worker: {{command: "{cmd}"}}\n',
                         name=f"{name}.yaml")
    r = loom.run("run", job("reuse", "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "))
    assert r.returncode == 0, r.stdout + r.stderr
    port = [e for e in loom.events() if e["event"] == "registered"][0]["port"]
    assert f"[worker:0] bound {port}" in r.stdout, r.stdout
    plain = job("plain", "")
    r = loom.run("run", plain)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "root cause: worker:0" in r.stderr and "Address already in use" in r.stderr, r.stderr
    assert "said 'Address already in use'" in r.stderr and "LOOM_PORT_HOLD=start" in r.stderr
    r = loom.run("run", plain, env={"LOOM_PORT_HOLD": "start"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "said 'Address already in use'" not in r.stderr and "[worker:0] bound" in r.stdout
