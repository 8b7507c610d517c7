"""Restart policies: restart: task restarts only the failed task (its peers
keep running and learn its new address), max_restarts, retry_on, and
heartbeats that declare stopped tasks lost."""
import json
import os
import signal
import time

from conftest import LIBLOOM, loom_pids_of, yaml_env


def events(loom, name):
    return [e for e in loom.events() if e["event"] == name]


def test_restart_task_restarts_only_that_task(loom):
    lib = LIBLOOM
    watch = os.path.join(os.path.dirname(__file__), "cluster_watch.py")
    spec = loom.spec(f"""
name: rtask
restart: task
max_restarts: 2
env: {yaml_env({"LOOM_LIB": lib})}
roles:
  chief: {{command: [/usr/bin/python3, {watch}, "2"]}}
  worker:
    instances: 2
    command: 'echo "start $LOOM_INDEX attempt=$LOOM_ATTEMPT pid=$$"; if [ $LOOM_INDEX = 1 ] && [ $LOOM_ATTEMPT -lt 2 ]; then sleep 0.3; exit 3; fi; sleep 2'
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    # worker:0 started once; worker:1 three times with LOOM_ATTEMPT 0, 1, 2
    assert len([l for l in out if l.startswith("[worker:0] start 0")]) == 1
    assert [l.split()[3] for l in out if l.startswith("[worker:1] start 1")] == \
        ["attempt=0", "attempt=1", "attempt=2"]
    assert "restarting it (1 of 2)" in r.stderr and "restarting it (2 of 2)" in r.stderr
    st = {t["task"]: t for t in loom.state()["tasks"]}
    assert st["worker:1"]["restarts"] == 2 and st["worker:1"]["attempt"] == 2
    assert st["worker:0"]["restarts"] == 0 and st["worker:0"]["attempt"] == 0
    assert loom.state()["attempt"] == 0  # the job itself did not restart
    # the peers learn the new address: the chief saw version 2 of the cluster
    rejoined = events(loom, "rejoined")
    assert len(rejoined) == 2
    line = next(l for l in out if l.startswith("[chief:0] CLUSTER"))
    cluster = json.loads(line.split(" ", 2)[2])
    assert cluster["worker"][1] == f'{rejoined[-1]["host"]}:{rejoined[-1]["port"]}'
    # a restarted task asks for its old port and gets it back (nothing else
    # took it): peers that keep the address they were given (TensorFlow's
    # ClusterCoordinator) find it again
    ports = [e["port"] for e in events(loom, "registered") if e["task"] == "worker:1"]
    assert len(ports) == 3 and len(set(ports)) == 1, ports
    # the restart needed no stop of the others
    assert events(loom, "stopped") == [] and events(loom, "attempt_failed") == []


def test_max_restarts_exhausted_fails_the_job(loom):
    spec = loom.spec("""
name: rmax
restart: task
max_restarts: 1
roles:
  worker: {instances: 2, command: 'if [ $LOOM_INDEX = 0 ]; then sleep 0.2; exit 4; fi; sleep 30'}
""")
    t0 = time.time()
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1
    assert time.time() - t0 < 10
    assert "restarting it (1 of 1)" in r.stderr and "root cause: worker:0 (attempt 1)" in r.stderr
    assert len(events(loom, "failed")) == 2


def test_retry_on_limits_what_is_retried(loom):
    spec = loom.spec("""
name: retryon
restart: task
max_restarts: 3
retries: 2
retry_on: [75]
roles:
  worker: {command: 'if [ $LOOM_ATTEMPT = 0 ]; then exit 75; fi; if [ $LOOM_ATTEMPT = 1 ]; then kill -KILL $$; fi; exit 3'}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1
    fails = [(e["attempt"], e.get("exit_code"), e.get("signal")) for e in events(loom, "failed")]
    # 75 is in retry_on: restarted; SIGKILL: always retried; 3: fails the job at once
    assert fails == [(0, 75, None), (1, 0, 9), (2, 3, None)], fails
    assert "not in retry_on: no retry" in r.stderr
    assert loom.state()["attempt"] == 0  # retries: 2 not used for a code outside retry_on


def test_stopped_task_is_lost_after_heartbeat_timeout_and_restarted(loom):
    spec = loom.spec("""
name: hb
restart: task
max_restarts: 1
heartbeat_timeout: 2s
roles:
  worker: {command: 'echo attempt $LOOM_ATTEMPT; if [ $LOOM_ATTEMPT = 0 ]; then kill -STOP $$; fi; echo done'}
""")
    t0 = time.time()
    r = loom.run("run", spec, timeout=60)
    took = time.time() - t0
    assert r.returncode == 0, r.stderr
    assert "[worker:0] done" in r.stdout
    lost = events(loom, "lost")
    assert len(lost) == 1 and "stopped for" in lost[0]["reason"]
    assert 2.0 < took < 8.0, took


def test_hung_agent_is_lost_after_heartbeat_timeout(loom):
    spec = loom.spec("""
name: hbagent
heartbeat_timeout: 2s
roles:
  worker: {instances: 2, command: 'sleep 30 & sleep 30 & sleep 30 & wait'}
""")
    p = loom.popen("run", spec)
    loom.wait_running()
    agent = loom.state()["tasks"][1]["agent_pid"]
    t0 = time.time()
    os.kill(agent, signal.SIGSTOP)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 1
    assert "worker:1" in err and "no heartbeat from its agent" in err
    assert 1.5 < time.time() - t0 < 8
    # the stopped agent could not stop its task: loom did, before it
    # returned (its guard and the parent-death signal race the end of run)
    left = loom_pids_of(loom.home)
    assert not left, [(p, open(f"/proc/{p}/cmdline", "rb").read()) for p in left]


def test_a_role_may_have_its_own_restart_policy(loom):
    """restart: task for the job, restart: job for the ps role (TensorFlow's
    ParameterServerStrategy: a worker comes back alone, a lost ps loses its
    variables and fails the attempt): the worker restarts alone, the ps's
    failure fails the attempt and the job retries."""
    spec = loom.spec("""
name: rrole
restart: task
max_restarts: 2
retries: 1
roles:
  chief: {command: 'sleep 3'}
  worker: {command: 'echo "w $LOOM_ATTEMPT"; if [ $LOOM_ATTEMPT = 0 ]; then exit 3; fi; sleep 2'}
  ps:
    restart: job
    command: 'echo "ps $LOOM_ATTEMPT"; if [ $LOOM_ATTEMPT = 0 ]; then sleep 1; exit 4; fi; sleep 30'
""")
    r = loom.run("run", spec, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    ev = loom.events()
    restarting = [e["task"] for e in ev if e["event"] == "restarting"]
    assert restarting == ["worker:0"], restarting  # the ps never restarts alone
    failed = [e for e in ev if e["event"] == "attempt_failed"]
    assert len(failed) == 1 and "ps:0" in json.dumps(failed[0]), failed
    assert loom.state()["attempt"] == 1
    # the role's policy is kept in the job directory's spec (a detached
    # coordinator reads it from there)
    assert "restart: job" in (loom.job_dir() / "spec.yaml").read_text() or \
        '"restart": "job"' in (loom.job_dir() / "spec.yaml").read_text()
