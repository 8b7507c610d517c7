"""Failures: the first failure stops the attempt within 2 seconds, retries
restart the whole job, and the summary names the root cause."""
import json
import os
import signal
import time

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


def test_memory_and_vcores_are_enforced(loom):
    spec = loom.spec("""
name: limits
roles:
  small: {memory: 64MiB, command: [/usr/bin/python3, -c, "b = bytearray(400 * 1024 * 1024); print('allocated')"]}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1, r.stdout
    assert "allocated" not in r.stdout
    # cgroup: the OOM kill is named; rlimit fallback: the allocation fails
    assert "out of memory: the task reached its memory limit of 64 MiB" in r.stderr or \
        "MemoryError" in r.stderr, r.stderr
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
