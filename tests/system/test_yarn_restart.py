"""A ResourceManager or a NodeManager restarted in the middle of a loom job
on YARN (issue 31 item 4), on the multi-host cluster (conftest's
hadoop_hosts), which yarn-cluster.sh --hosts starts with work-preserving
recovery: the RM's state in a FileSystemRMStateStore on the head host,
each NodeManager's in its recovery directory, fixed NodeManager ports.

The RM is SIGKILLed while every task runs and started again: the
application master waits for it (yarn.resourcemanager.connect.max-wait.ms),
registers again on the resync, and the job finishes with no task started
again and no container left. The same for a NodeManager. Without recovery
(the one-host session cluster `yarn`), the job fails saying the
ResourceManager was lost and naming the properties that enable recovery.

Each test leaves the cluster as it found it: the RM up and both
NodeManagers RUNNING, even when it fails."""
import json
import os
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from netns import ip

NODES = (1, 2)
LIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
RECOVERY_PROPS = ("yarn.resourcemanager.recovery.enabled",
                  "yarn.resourcemanager.store.class",
                  "yarn.resourcemanager.work-preserving-recovery.enabled",
                  "yarn.nodemanager.recovery.enabled")


def alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def apps(rest):
    return (rest("apps").get("apps") or {}).get("app") or []


def both_nodes_running(rest):
    try:
        nodes = rest("nodes")["nodes"]["node"]
    except OSError:
        return False
    return sorted(n["state"] for n in nodes) == ["RUNNING", "RUNNING"]


def heal(c):
    """Starts again whichever of the RM and the NodeManagers is down (c: a
    HadoopHosts or a Yarn); waits until both NodeManagers are RUNNING."""
    pids = c.dir / "pids"
    rm = pids / "rm.pid"
    if not alive(int(rm.read_text())):
        c.script("rm", "start", timeout=300)
    for n in NODES:
        if not alive(int((pids / f"nm{n}.pid").read_text())):
            c.script("nodemanager", "start", n, timeout=300)
    end = time.time() + 120
    while not both_nodes_running(c.rest) and time.time() < end:
        time.sleep(0.2)
    assert both_nodes_running(c.rest), "the cluster did not come back: RM and 2 NodeManagers"


def node_job_procs(h, home):
    """{pid: command line} of the processes on the nodes whose environment
    names this test's LOOM_HOME."""
    out = {}
    for n in NODES:
        for p in ip("netns", "pids", h.ns[f"node{n}"], check=False).split():
            try:
                env = Path(f"/proc/{p}/environ").read_bytes()
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(home).encode() in env and alive(p):
                out[int(p)] = b" ".join(cmd).decode(errors="replace")
    return out


def nm_containers(h, app_id):
    """The containers of app_id each NodeManager still lists (its REST API)."""
    left = []
    for node in h.rest("nodes")["nodes"]["node"]:
        with urllib.request.urlopen(f"http://{node['nodeHTTPAddress']}/ws/v1/node/containers",
                                    timeout=10) as r:
            cs = (json.load(r).get("containers") or {}).get("container") or []
        left += [c["id"] for c in cs if app_id[len("application_"):] in c["id"]]
    return left


def nm_running(h, n, app_id):
    """The ids of app_id's containers NodeManager nmN lists RUNNING (its own
    REST API: None while it does not answer)."""
    addr = [x["nodeHTTPAddress"] for x in h.rest("nodes")["nodes"]["node"]
            if x["id"].startswith(h.addrs[f"node{n}"] + ":")][0]
    try:
        with urllib.request.urlopen(f"http://{addr}/ws/v1/node/containers", timeout=5) as r:
            cs = (json.load(r).get("containers") or {}).get("container") or []
    except OSError:
        return None
    return sorted(c["id"] for c in cs
                  if app_id[len("application_"):] in c["id"] and c["state"] == "RUNNING")


class Gate:
    """A port on the client's address that refuses connections until
    open(): the tasks wait for it, so that they run for as long as the
    test needs them to, whatever the machine's speed."""

    def __init__(self, addr):
        self.s = socket.socket()
        self.s.bind((addr, 0))
        self.addr, self.port = self.s.getsockname()

    def open(self):
        self.s.listen(64)

    def close(self):
        self.s.close()

    def command(self, then="true"):
        py = (f"import socket; socket.create_connection(('{self.addr}', {self.port}), 2)")
        return (f'echo start $LOOM_TASK attempt $LOOM_ATTEMPT; '
                f'until /usr/bin/python3 -c \\"{py}\\" 2>/dev/null; do sleep 0.5; done; '
                f'echo end $LOOM_TASK attempt $LOOM_ATTEMPT; {then}')


@pytest.fixture
def rloom(loom, hadoop_hosts):
    """loom on the multi-host cluster; after the test (passed or not) the RM
    and both NodeManagers run, no application of the test is live and no
    process of its jobs is left on a node."""
    h = hadoop_hosts
    loom.env["HADOOP_CONF_DIR"] = str(h.conf)
    loom.env.pop("HADOOP_USER_NAME", None)
    heal(h)
    try:
        yield loom
    finally:
        heal(h)
    # (an application whose client a failed test killed ends when the RM
    # expires its AM: 10 s)
    loom.wait_for(lambda: not [a for a in apps(h.rest) if a["state"] in LIVE], timeout=60,
                  what="no live application")
    loom.wait_for(lambda: not node_job_procs(h, loom.home), timeout=30,
                  what="every agent and task of the test's jobs on the nodes to end")


def spec(rloom, name, gate, n=2):
    return rloom.spec(f"""
name: {name}
backend: yarn
restart: task
max_restarts: 2
roles:
  worker: {{instances: {n}, command: "{gate.command()}"}}
""", name=f"{name}.yaml")


def assert_no_restart(rloom, out, job_dir=None, n=2):
    st = rloom.state(job_dir)
    assert st["state"] == "succeeded", st
    for t in st["tasks"]:
        assert t.get("attempt", 0) == 0 and t.get("restarts", 0) == 0, t
    for i in range(n):
        assert f"[worker:{i}] end worker:{i} attempt 0" in out, out
    assert "attempt 1" not in out, out


def app_ended(rloom, h, app_id, timeout=30):
    """The RM's report of app_id once it is no longer live."""
    def final():
        a = [a for a in apps(h.rest) if a["id"] == app_id]
        return a and a[0]["state"] not in LIVE and a[0]
    return rloom.wait_for(final, timeout=timeout, what=f"{app_id} to end in the RM")


def restart_rm(h):
    """kill -9 the RM, start it again; the seconds it was away."""
    t0 = time.monotonic()
    h.script("rm", "kill")
    h.script("rm", "start", timeout=300)
    return time.monotonic() - t0


def test_run_survives_a_resourcemanager_restart(rloom, hadoop_hosts):
    """`loom run --backend yarn` (an unmanaged AM in the client) with the RM
    SIGKILLed while both tasks run and started again."""
    h = hadoop_hosts
    gate = Gate(h.addrs["client"])
    s = spec(rloom, "rmrun", gate)
    p = rloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        rloom.wait_running(timeout=120)
        app_id = [a for a in apps(h.rest) if a["name"] == "rmrun"][0]["id"]
        away = restart_rm(h)
        rloom.wait_for(lambda: [a for a in apps(h.rest) if a["id"] == app_id and
                                a["state"] == "RUNNING"], timeout=60,
                       what="the recovered application RUNNING")
        gate.open()
        out, err = p.communicate(timeout=180)
    finally:
        gate.close()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    print(f"\nRM away {away:.1f}s (SIGKILL to RUNNING again)")
    assert p.returncode == 0, out + err
    assert "registered again with the restarted ResourceManager" in err, err
    # the AM waited for the RM, saying what for, and no longer than that
    assert "waiting for it to come back, at most 20000 ms" in err, err
    waited = int(re.search(r"the ResourceManager answers again after (\d+) ms", err)[1])
    assert waited <= away * 1000 + 2000, (waited, away)
    print(f"the application master waited {waited} ms for the RM")
    assert_no_restart(rloom, out)
    app = app_ended(rloom, h, app_id)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app
    rloom.wait_for(lambda: not nm_containers(h, app_id), timeout=30,
                   what="no container of the application on a NodeManager")


def test_submit_survives_a_resourcemanager_restart(rloom, hadoop_hosts):
    """`loom submit` (a managed AM in its own container on a node) with the
    RM SIGKILLed while both tasks run and started again; the client sees
    it all through the job's published copy (`loom status`, `loom logs`)."""
    h = hadoop_hosts
    gate = Gate(h.addrs["client"])
    s = spec(rloom, "rmsub", gate)
    try:
        r = rloom.run("submit", s, timeout=120)
        assert r.returncode == 0, r.stderr
        job = r.stdout.strip()
        jd = rloom.home / "jobs" / job

        def running():
            rloom.run("status", job, timeout=60)  # brings the client's copy up to date
            return (jd / "state.json").exists() and all(
                t["state"] == "running" for t in rloom.state(jd)["tasks"])
        rloom.wait_for(running, timeout=120, what="both tasks running")
        app_id = [a["id"] for a in apps(h.rest) if a["name"] == "rmsub"][0]
        away = restart_rm(h)
        rloom.wait_for(lambda: [a for a in apps(h.rest) if a["id"] == app_id and
                                a["state"] == "RUNNING"], timeout=60,
                       what="the recovered application RUNNING")
        gate.open()
        app = app_ended(rloom, h, app_id, timeout=180)
    finally:
        gate.close()
    print(f"\nRM away {away:.1f}s (SIGKILL to RUNNING again)")
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app
    logs = rloom.run("logs", job).stdout
    # the same attempt of the application master, which registered again
    assert "registered again with the restarted ResourceManager" in \
        (jd / "coordinator.log").read_text()
    assert_no_restart(rloom, logs, jd)
    with urllib.request.urlopen(f"{h.web}/ws/v1/cluster/apps/{app_id}/appattempts",
                                timeout=10) as r:
        att = json.load(r)["appAttempts"]["appAttempt"]
    assert len(att) == 1, att


def test_run_survives_a_nodemanager_restart(rloom, hadoop_hosts):
    """A NodeManager SIGKILLed while its task runs and started again at
    once (NodeManager recovery): the container lives on, the job finishes
    with no task started again."""
    h = hadoop_hosts
    gate = Gate(h.addrs["client"])
    s = spec(rloom, "nmrun", gate)
    p = rloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        rloom.wait_running(timeout=120)
        procs = rloom.wait_for(lambda: (lambda d: len(
            [c for c in d.values() if "agent" in c]) == 2 and d)(node_job_procs(h, rloom.home)),
            timeout=30, what="both agents on the nodes")
        agents = [pid for pid, c in procs.items() if c.startswith("./loom agent")]
        n = 1 if ip("netns", "identify", str(agents[0])).strip() == h.ns["node1"] else 2
        app_id = [a for a in apps(h.rest) if a["name"] == "nmrun"][0]["id"]
        mine = nm_running(h, n, app_id)
        assert mine, f"no container of {app_id} on nm{n}"
        old = h.pid(f"nm{n}")
        t0 = time.monotonic()
        os.kill(old, signal.SIGKILL)
        # the kill is delivered, not yet done: a JVM exiting still has its
        # command line, and the script refuses to start a NodeManager that
        # "already runs" (CI saw it)
        rloom.wait_for(lambda: not alive(old), timeout=30, what=f"the killed nm{n} ({old}) gone")
        h.script("nodemanager", "start", n, timeout=300)
        assert h.pid(f"nm{n}") != old
        # the new NodeManager recovered the same containers, RUNNING
        rloom.wait_for(lambda: nm_running(h, n, app_id) == mine, timeout=120,
                       what=f"nm{n} again, listing {mine} RUNNING")
        away = time.monotonic() - t0
        # the agents outlived their NodeManager
        assert all(alive(pid) for pid in agents), procs
        gate.open()
        out, err = p.communicate(timeout=180)
    finally:
        gate.close()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    print(f"\nnm{n} away {away:.1f}s (SIGKILL to RUNNING again)")
    assert p.returncode == 0, out + err
    assert_no_restart(rloom, out)


def test_without_recovery_the_job_says_the_resourcemanager_was_lost(loom, yarn):
    """The one-host cluster runs without recovery: an RM restart loses the
    application, and the job fails saying so and naming the properties that
    enable recovery. The RM is started again and both NodeManagers RUNNING
    before the test ends."""
    loom.env["HADOOP_CONF_DIR"] = str(yarn.conf)
    s = loom.spec("""
name: norecovery
backend: yarn
roles:
  worker: {instances: 2, command: 'sleep 300'}
""")
    p = loom.popen("run", s)
    try:
        loom.wait_running(timeout=90)
        t0 = time.monotonic()
        yarn.script("rm", "kill")
        yarn.script("rm", "start", timeout=300)
        out, err = p.communicate(timeout=120)
        failed_in = time.monotonic() - t0
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        heal(yarn)
    print(f"\nwithout recovery: the job failed {failed_in:.1f}s after the RM's SIGKILL")
    assert p.returncode != 0, out + err
    assert "the ResourceManager was lost" in err, err
    for prop in RECOVERY_PROPS:
        assert prop in err, (prop, err)
    assert loom.state()["state"] == "failed"
    loom.wait_for(lambda: not [a for a in yarn.apps() if a["name"] == "norecovery" and
                               a["state"] in LIVE], timeout=30, what="no live application")
