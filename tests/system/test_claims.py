"""README claims checked as a user would see them: `gpus` ->
CUDA_VISIBLE_DEVICES, the external backend with an agent started by hand,
agents killing their tasks when the coordinator stops answering, the
services' SIGKILL escalation, the agents' cpu/memory metrics, and `last`
as a JOB."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import LOOM, loom_pids_of


def alive(pid):
    """A pid that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ids_by_task(loom, job_dir):
    """Each task's CUDA_VISIBLE_DEVICES as it printed it ("-" when unset)."""
    out = {}
    for line in (job_dir / "logs/all.log").read_text().splitlines():
        if "CVD=" in line:
            task, _, ids = line.split("CVD=", 1)[1].partition(" ")
            out[task] = ids
    return out


# ---- gpus -> CUDA_VISIBLE_DEVICES ------------------------------------------

def run_with_fake_gpus(loom, n, *args):
    """`loom *args` in a private mount namespace whose /dev has n extra
    entries nvidia0..nvidia<n-1> (an overlay on the real /dev, its shm and
    pts mounts kept): loom counts GPUs by those names, and this machine
    has none. Needs root (unshare)."""
    t = loom.tmp / "devns"
    for d in ("u", "w", "real"):
        (t / d).mkdir(parents=True, exist_ok=True)
    fakes = " ".join(f"/dev/nvidia{i}" for i in range(n))
    script = (f"mount --rbind /dev {t}/real && "
              f"mount -t overlay overlay -o lowerdir=/dev,upperdir={t}/u,workdir={t}/w /dev && "
              f"for m in shm pts mqueue; do [ -d {t}/real/$m ] && mount --rbind {t}/real/$m /dev/$m; done; "
              f"touch {fakes} /dev/nvidiactl && exec \"$@\"")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                           "sh", str(LOOM), *map(str, args)], env=loom.env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a mount namespace")
def test_gpus_become_cuda_visible_devices_round_robin(loom):
    cmd = "echo CVD=$LOOM_TASK ${CUDA_VISIBLE_DEVICES--}"
    spec = loom.spec(f"""
name: gpus
roles:
  chief: {{command: "{cmd}", gpus: 1}}
  worker: {{instances: 2, command: "{cmd}", gpus: 1}}
  evaluator: {{command: "{cmd}", gpus: 2}}
  tensorboard: {{command: "{cmd}", service: false}}
""")
    r = run_with_fake_gpus(loom, 2, "run", spec)
    assert r.returncode == 0, r.stdout + r.stderr
    # handed out round-robin over the machine's 2 GPUs, in task order;
    # a task without gpus sees none: CUDA_VISIBLE_DEVICES set and empty
    # (issue 31: unset would mean every GPU of the machine)
    assert ids_by_task(loom, loom.job_dir()) == {
        "chief:0": "0", "worker:0": "1", "worker:1": "0", "evaluator:0": "1,0",
        "tensorboard:0": ""}


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a mount namespace")
def test_more_gpus_than_the_machine_has_is_refused(loom):
    spec = loom.spec("""
name: toomany
roles:
  worker: {command: "true", gpus: 3}
""")
    r = run_with_fake_gpus(loom, 2, "run", spec)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "role 'worker' asks for 3 gpus per task; this machine has 2" in r.stderr
    assert not loom.jobs() or loom.state()["tasks"][0]["state"] != "running"
    # and this machine as it is (no /dev/nvidia*): 1 is already too many
    r = loom.run("run", spec, "--set", "roles.worker.gpus=1")
    assert r.returncode == 2 and "this machine has 0" in r.stderr, r.stderr


# ---- the external backend ---------------------------------------------------

def test_external_backend_runs_an_agent_started_by_hand(loom):
    spec = loom.spec("""
name: ext
backend: external
roles:
  worker: {command: "echo hand-started $LOOM_TASK attempt=$LOOM_ATTEMPT"}
""")
    r = loom.run("submit", spec)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().splitlines()[-1]
    jd = loom.home / "jobs" / job
    loom.wait_for(lambda: (jd / "coord.json").exists() and (jd / "secret").exists(),
                  what="coord.json and secret")
    time.sleep(0.5)
    assert loom.state(jd)["tasks"][0]["state"] in ("pending", "launched", "waiting"), \
        "the external backend started something itself"
    # as README documents: the values are in coord.json and secret
    env = dict(loom.env, LOOM_COORD=json.loads((jd / "coord.json").read_text())["addr"],
               LOOM_SECRET=(jd / "secret").read_text().strip(), LOOM_TASK="worker:0",
               LOOM_ATTEMPT="0")
    agent = subprocess.run([str(LOOM), "agent"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert agent.returncode == 0, agent.stderr
    loom.wait_for(lambda: loom.state(jd)["state"] == "succeeded", what="job succeeded")
    r = loom.run("logs", job)
    assert "hand-started worker:0 attempt=0" in r.stdout, r.stdout


# ---- a coordinator that stops answering -------------------------------------

def test_agents_kill_their_tasks_when_the_coordinator_stops_answering(loom):
    spec = loom.spec("""
name: hb
roles:
  worker: {instances: 2, command: "sleep 300"}
""")
    r = loom.run("submit", spec, env={"LOOM_HEARTBEAT_TIMEOUT": "2000"})
    assert r.returncode == 0, r.stderr
    loom.wait_running()
    st = loom.state()
    coord = st["coordinator"]["pid"]
    tasks = [p for t in st["tasks"] for p in t["pids"]]
    agents = [t["agent_pid"] for t in st["tasks"]]
    assert len(tasks) == 2 and all(alive(p) for p in tasks + agents)
    os.kill(coord, signal.SIGSTOP)  # hung, not dead: its sockets stay open
    try:
        t0 = time.time()
        # heartbeat timeout 2 s, heartbeats every 1 s, the agent's stop grace 1 s
        loom.wait_for(lambda: not any(alive(p) for p in tasks + agents), timeout=6,
                      what="tasks and agents gone after the coordinator stopped")
        took = time.time() - t0
        assert took >= 1.5, f"gone after {took:.2f}s: before the heartbeat timeout"
        assert alive(coord)
    finally:
        os.kill(coord, signal.SIGCONT)
        os.kill(coord, signal.SIGKILL)
        loom.wait_for(lambda: not alive(coord), timeout=5, what="the coordinator gone")
    # the fixture then checks no process of this LOOM_HOME is left


# ---- services: SIGTERM, then SIGKILL after the grace -------------------------

def test_a_service_ignoring_sigterm_is_sigkilled_after_the_grace(loom):
    spec = loom.spec("""
name: svc
roles:
  worker: {command: "sleep 0.5"}
  ps: {command: "trap '' TERM; while :; do sleep 0.1; done"}
""")
    r = loom.run("run", spec, env={"LOOM_SERVICE_GRACE": "1500"})
    assert r.returncode == 0, r.stdout + r.stderr
    ev = loom.events()
    done = next(e for e in ev if e["event"] == "finishing_roles_done")
    stop = next(e for e in ev if e.get("task") == "ps:0" and e["event"] == "stopped")
    assert stop["signal"] == 9 and stop["signal_name"] == "KILL", stop
    # SIGTERM at once, SIGKILL LOOM_SERVICE_GRACE (1.5 s) later
    assert 1.5 <= stop["t"] - done["t"] < 2.5, stop["t"] - done["t"]
    assert loom.state()["state"] == "succeeded"


# ---- the agents' cpu_percent and memory_bytes metrics -------------------------

def test_agents_report_cpu_and_memory_of_each_task(loom):
    burn = loom.tmp / "burn.py"
    burn.write_text("import time\nb = b'x' * (256 << 20)\nt = time.time()\n"
                    "while time.time() - t < 8:\n    pass\n")
    spec = loom.spec(f"""
name: metrics
roles:
  worker: {{command: [python3, {burn}]}}
  chief: {{command: "sleep 10"}}
""")
    # the chief outlives the worker's 8 s loop, so the worker is never
    # stopped early by the job's end, however late its agent started
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stdout + r.stderr
    m = {}
    for e in loom.events():
        if e["event"] == "metric" and e.get("source") == "agent":
            m.setdefault((e["task"], e["tag"]), []).append(e["value"])
    # every 3 s over 8 s: at least 2 samples of each, for each task
    for k in [(t, g) for t in ("worker:0", "chief:0") for g in ("cpu_percent", "memory_bytes")]:
        assert len(m.get(k, [])) >= 2, (k, m)
    # a busy loop shows up as CPU (percent of a core; the machine is shared,
    # so not necessarily 100), an idle sleep does not
    assert max(m["worker:0", "cpu_percent"]) > 20, m["worker:0", "cpu_percent"]
    assert max(m["chief:0", "cpu_percent"]) < 5, m["chief:0", "cpu_percent"]
    # 256 MiB written: resident
    assert max(m["worker:0", "memory_bytes"]) >= 256 << 20, m["worker:0", "memory_bytes"]
    assert max(m["chief:0", "memory_bytes"]) < 16 << 20, m["chief:0", "memory_bytes"]


# ---- JOB = last ----------------------------------------------------------------

def test_last_names_the_newest_job_for_status_logs_and_kill(loom):
    first = loom.spec("name: first\nroles:\n  worker: {command: \"echo one\"}\n", "a.yaml")
    second = loom.spec("name: second\nroles:\n  worker: {command: \"echo two; sleep 300\"}\n",
                       "b.yaml")
    assert loom.run("run", first).returncode == 0
    time.sleep(1.1)  # job ids carry the second they were made in
    r = loom.run("submit", second)
    assert r.returncode == 0, r.stderr
    job2 = r.stdout.strip().splitlines()[-1]
    assert job2.startswith("second-")
    jd2 = loom.home / "jobs" / job2
    loom.wait_for(lambda: (jd2 / "state.json").exists() and
                  loom.state(jd2)["tasks"][0]["state"] == "running", what="second running")
    r = loom.run("status", "last")
    assert r.returncode == 0 and f"job      {job2}" in r.stdout, r.stdout
    loom.wait_for(lambda: "two" in loom.run("logs", "last").stdout, what="logs last")
    assert "one" not in loom.run("logs", "last").stdout
    r = loom.run("kill", "last")
    assert r.returncode == 0, r.stderr
    loom.wait_for(lambda: loom.state(jd2).get("state") not in ("running", "pending", None),
                  what="second stopped")
    assert loom.state(jd2)["state"] == "killed", loom.state(jd2)["state"]
    # the coordinator writes the final state, then exits with its agents
    loom.wait_for(lambda: not loom_pids_of(loom.home), timeout=5, what="the killed job's processes gone")
    first_dir = next(d for d in loom.jobs() if d.name.startswith("first-"))
    assert loom.state(first_dir)["state"] == "succeeded"
