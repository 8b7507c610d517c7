"""loom against a real Apache Hadoop YARN (3.5.0 from Maven Central: a
ResourceManager and two NodeManagers as separate JVMs, and HDFS beside it:
the test run's one Hadoop cluster, conftest's `yarn`, started once and
shared with the other modules that need it): the
script's HDFS stores a file on both DataNodes; `loom check --backend yarn` reports what the
ResourceManager's REST API says, specs YARN could never run are refused
with figures before anything is submitted, and a ResourceManager that
cannot be reached, or does not answer, is a backend error within seconds.
Jobs run on it: `loom run` as an unmanaged application master (the
coordinator, in C), `loom submit` as a managed one in a container; the
RM's REST API judges what is left afterwards (nothing RUNNING), and no
agent or task process outlives a job. What each task of a multi-role job
sees (one container a task), a failing task, `loom kill` and Ctrl-C, and
restart: task on YARN are the backend contract's cases (test_contract.py,
with YARN's own checks of the application and its containers)."""
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import LOOM as LOOM_BIN
from clusters import hadoop_available
from conftest import SANITIZED, loom_procs, no_process_left

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not hadoop_available(),
    reason="java and mvn are not installed (scripts/setup.sh installs a JDK and Maven)")


def submitted_nothing(yarn, before):
    assert len(yarn.apps()) == before, yarn.apps()


def test_the_script_gives_hdfs_too(yarn):
    """For what comes next (issue 16): the NameNode with both DataNodes live,
    the default filesystem, and a file stored with both its replicas."""
    core = (yarn.conf / "core-site.xml").read_text()
    assert f"<name>fs.defaultFS</name><value>hdfs://127.0.0.1:{yarn.nn_port}</value>" in core
    q = "jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
    with urllib.request.urlopen(f"{yarn.nn_web}/{q}", timeout=10) as r:
        info = json.load(r)["beans"][0]
    assert len(json.loads(info["LiveNodes"])) == 2 and not info["Safemode"], info
    data = b"loom on hdfs\n" * 1000
    me = pwd.getpwuid(os.getuid()).pw_name  # the NameNode's user: its superuser
    url = f"{yarn.nn_web}/webhdfs/v1/loom-test/a.txt?user.name={me}"
    # WebHDFS: the NameNode redirects a create to a DataNode
    req = urllib.request.Request(url + "&op=CREATE&overwrite=true", method="PUT")
    try:
        urllib.request.urlopen(req, timeout=10)
        raise AssertionError("no redirect to a DataNode")
    except urllib.error.HTTPError as e:
        assert e.code == 307, e
        dn = e.headers["Location"]
    req = urllib.request.Request(dn, data=data, method="PUT")
    assert urllib.request.urlopen(req, timeout=30).status == 201
    with urllib.request.urlopen(url + "&op=OPEN", timeout=30) as r:
        assert r.read() == data
    # the file's one block, once on each DataNode (the cluster is the run's
    # shared one: other tests' blocks are there too)
    blocks = [p for i in (1, 2) for p in (yarn.dir / f"dn{i}" / "data").rglob("blk_*")
              if not p.name.endswith(".meta") and p.stat().st_size == len(data) and
              p.read_bytes() == data]
    assert sorted(p.parent.parts[len(yarn.dir.parts)] for p in blocks) == ["dn1", "dn2"], blocks


def rest_nodes(yarn):
    """id -> (memory MB, vcores, GPUs, labels) from the RM's REST API."""
    out = {}
    for n in yarn.rest("nodes")["nodes"]["node"]:
        t = n["totalResource"]
        gpus = sum(r["value"] for r in t["resourceInformations"]["resourceInformation"]
                   if r["name"] == "yarn.io/gpu")
        out[n["id"]] = (n["state"], t["memory"], t["vCores"], gpus, n.get("nodeLabels") or [])
    return out


def test_check_reports_the_cluster(yloom, yarn):
    r = yloom.run("check", "--backend", "yarn", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith("ok   backend yarn: "))
    head = lines[i]
    m = re.fullmatch(r"ok   backend yarn: ResourceManager 127\.0\.0\.1:(\d+) \((.*)\): (\d+) of (\d+) "
                     r"nodes RUNNING, (\d+) MB, (\d+) vcores, (\d+) GPUs; node labels: (.*)", head)
    assert m, head
    assert int(m[1]) == yarn.rm_port
    assert m[2] == f"{yarn.conf}/yarn-site.xml"
    assert m[8] == "gpu (non-exclusive)"
    # each node as the RM's REST API has it
    want = rest_nodes(yarn)
    got = {}
    for l in lines[i + 1:i + 1 + len(want)]:
        n = re.fullmatch(r"     node (\S+) (\w+): (\d+) MB, (\d+) vcores, (\d+) GPUs(?:, label (\S+))?", l)
        assert n, l
        got[n[1]] = (n[2], int(n[3]), int(n[4]), int(n[5]), [n[6]] if n[6] else [])
    assert got == want, (got, want)
    # the script's nodes: nm1 3072 MB, 2 vcores, 2 GPUs, label gpu; nm2 4096 MB, 4 vcores
    assert sorted(v[1:] for v in got.values()) == [(3072, 2, 2, ["gpu"]), (4096, 4, 0, [])]
    assert (int(m[3]), int(m[4])) == (2, 2)
    assert (int(m[5]), int(m[6]), int(m[7])) == (7168, 6, 2)
    metrics = yarn.rest("metrics")["clusterMetrics"]
    assert metrics["activeNodes"] == 2
    # the other lines of `loom check` are as for every backend
    assert lines[0].startswith("ok   job directory ")
    assert any(l == "ok   loopback TCP listens" for l in lines)


def spec(yloom, role, top=""):
    return yloom.spec(f"name: y\nbackend: yarn\n{top}roles:\n  w: {{command: 'true', {role}}}\n")


NODES = ("nodes: localhost:\\d+ RUNNING: \\d+ MB, \\d+ vcores, \\d+ GPUs(, label gpu)?; "
         "localhost:\\d+ RUNNING: \\d+ MB, \\d+ vcores, \\d+ GPUs(, label gpu)?\\)")


@pytest.mark.parametrize("role,top,want", [
    ("label: fpga", "",
     r"role 'w' asks for node label 'fpga', which the YARN cluster does not have \(its labels: gpu "
     r"\(non-exclusive\)\): set roles\.w\.label to one of them, or remove it"),
    ("gpus: 3", "",
     r"role 'w' asks for 1 vcores, no set memory and 3 GPUs per task; no RUNNING node of the default "
     r"partition of the YARN cluster has that: the largest has 4096 MB, 4 vcores and 2 GPUs \("
     + NODES + ": lower roles.w's resources"),
    ("memory: 5GiB, vcores: 2", "",
     r"role 'w' asks for 2 vcores, 5120 MB of memory and 0 GPUs per task; no RUNNING node of the "
     r"default partition of the YARN cluster has that: the largest has 4096 MB, 4 vcores and 2 GPUs"),
    ("label: gpu, memory: 3500MiB", "",
     r"role 'w' asks for 1 vcores, 3500 MB of memory and 0 GPUs per task with label gpu; no RUNNING "
     r"node with label gpu of the YARN cluster has that: the largest has 3072 MB, 2 vcores and 2 "
     r"GPUs \(" + NODES + ": lower roles.w's resources or change its label"),
    ("vcores: 1", "queue: nosuch\n",
     r"queue 'nosuch' is not a queue of the YARN cluster \(its leaf queues: default\): set queue to "
     r"one of them"),
    ("instances: 7", "",
     r"the job's 7 containers ask for 7 vcores, 3584 MB and 0 GPUs together, and start together "
     r"\(gang start\); the YARN cluster's RUNNING nodes have 6 vcores, 7168 MB and 2 GPUs in all: 7 "
     r"vcores is more than it could ever grant at once: ask for fewer instances or smaller roles"),
], ids=["unknown-label", "too-many-gpus", "too-much-memory", "label-node-too-small", "no-queue",
        "gang-larger-than-the-cluster"])
def test_refused_with_figures(yloom, yarn, role, top, want):
    before = len(yarn.apps())
    t0 = time.monotonic()
    r = yloom.run("run", spec(yloom, role, top), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(r"loom: .*job\.yaml: cannot run on backend yarn: " + want, r.stderr), r.stderr
    assert time.monotonic() - t0 < 10
    assert yloom.jobs() == []
    submitted_nothing(yarn, before)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf_at(yloom, yarn, port):
    """A copy of the cluster's configuration whose RM address is port."""
    d = yloom.tmp / f"conf-{port}"
    d.mkdir()
    site = (yarn.conf / "yarn-site.xml").read_text()
    (d / "yarn-site.xml").write_text(site.replace(f"127.0.0.1:{yarn.rm_port}<", f"127.0.0.1:{port}<"))
    return d


def test_wrong_address_is_a_backend_error_at_once(yloom, yarn):
    before = len(yarn.apps())
    port = free_port()
    d = conf_at(yloom, yarn, port)
    t0 = time.monotonic()
    r = yloom.run("check", "--backend", "yarn", env={"HADOOP_CONF_DIR": str(d)}, timeout=30)
    assert r.returncode == 3, r.stdout + r.stderr
    assert (f"FAIL backend yarn: the ResourceManager at 127.0.0.1:{port} (yarn.resourcemanager.address "
            f"in {d}/yarn-site.xml): cannot connect: Connection refused: is the ResourceManager "
            f"running, and HADOOP_CONF_DIR the cluster's?") in r.stdout, r.stdout
    r = yloom.run("run", spec(yloom, "memory: 1GiB"), env={"HADOOP_CONF_DIR": str(d)}, timeout=30)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "cannot run on backend yarn: cannot ask YARN for its nodes: the ResourceManager at " \
           f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 5
    assert yloom.jobs() == []
    # a NodeManager's port: Hadoop IPC, but it wants SASL (tokens), as the AM will have to
    d = conf_at(yloom, yarn, yarn.nm_ports[0])
    r = yloom.run("check", "--backend", "yarn", env={"HADOOP_CONF_DIR": str(d)}, timeout=30)
    assert r.returncode == 3
    assert "getClusterMetrics failed (fatal: connection closed): org.apache.hadoop.security." \
           "AccessControlException: SIMPLE authentication is not enabled.  Available:[TOKEN]" \
           in r.stdout, r.stdout
    # the RM's web port: not Hadoop IPC at all
    d = conf_at(yloom, yarn, int(yarn.web.rsplit(":", 1)[1]))
    r = yloom.run("check", "--backend", "yarn", env={"HADOOP_CONF_DIR": str(d)}, timeout=30)
    assert r.returncode == 3
    assert 'getClusterMetrics: the reply does not look like Hadoop IPC: it starts with "HTTP"' \
           in r.stdout, r.stdout
    submitted_nothing(yarn, before)


def test_missing_configuration_is_named(yloom, tmp_path):
    r = yloom.run("check", "--backend", "yarn", env={"HADOOP_CONF_DIR": str(tmp_path)})
    assert r.returncode == 3
    assert f"FAIL backend yarn: HADOOP_CONF_DIR={tmp_path} has no yarn-site.xml" in r.stdout, r.stdout
    (tmp_path / "yarn-site.xml").write_text("<configuration>\n<property><name>x</name>\n</configuration>\n")
    r = yloom.run("run", spec(yloom, "memory: 1GiB"), env={"HADOOP_CONF_DIR": str(tmp_path)})
    assert r.returncode == 3
    assert f"{tmp_path}/yarn-site.xml:3: </configuration> closes <property>" in r.stderr, r.stderr


def test_a_resource_manager_that_does_not_answer_is_an_error_not_a_hang(yloom, yarn):
    """The RM frozen (SIGSTOP): connections are accepted by the kernel, no
    reply comes. loom gives up after its 10 s call timeout, naming the call."""
    rm = int((yarn.dir / "pids" / "rm.pid").read_text())
    os.kill(rm, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        r = yloom.run("check", "--backend", "yarn", timeout=60)
        took = time.monotonic() - t0
    finally:
        os.kill(rm, signal.SIGCONT)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"the ResourceManager at 127.0.0.1:{yarn.rm_port} (yarn.resourcemanager.address in " \
           f"{yarn.conf}/yarn-site.xml): no reply to getClusterMetrics within 10000 ms" in r.stdout, \
        r.stdout
    assert 9.5 < took < 15, took
    # It answers again. Unheard for 10 s (yarn.nm.liveness-monitor.expiry-interval-ms), its
    # NodeManagers may be LOST for a moment, which `loom check` reports, until they resync;
    # one that registers again may be listed twice meanwhile (its LOST entry and a NEW one:
    # seen in CI as "0 of 3 nodes RUNNING", and, on the run's shared cluster, as "0 of 4"
    # with both listed twice), and loom reports what the RM lists.
    seen = []

    def usable():
        r = yloom.run("check", "--backend", "yarn", timeout=60)
        seen.append(r.stdout)
        return r.returncode == 0
    yloom.wait_for(usable, timeout=60, what="`loom check --backend yarn` to pass again")
    for out in seen[:-1]:
        assert re.search(r"FAIL backend yarn: .*: \d of [2-4] nodes RUNNING", out), out
    # both NodeManagers back, for the tests after this one (a job's gang
    # is checked against the RUNNING nodes)
    yloom.wait_for(lambda: "2 of 2 nodes RUNNING" in yloom.run("check", "--backend", "yarn",
                                                              timeout=60).stdout,
                   timeout=90, what="both NodeManagers RUNNING again")


# ---- jobs on YARN ------------------------------------------------------------


def app_of(yarn, name):
    """The one YARN application of this name, as the RM's REST API has it."""
    apps = [a for a in yarn.apps() if a["name"] == name]
    assert len(apps) == 1, apps
    return apps[0]


def final_app(yloom, yarn, name, timeout=30):
    """The application once the RM reports it ended. The AM is told it is
    unregistered once the RM has saved the final state; the RM's reports
    move there a moment later (its dispatcher's event), and until then they
    show the state before (RUNNING, finalStatus UNDEFINED): CI saw that."""
    app_of(yarn, name)  # exactly one of this name
    return wait_app(yloom, yarn, name, ("FINISHED", "FAILED", "KILLED"), timeout=timeout)


def wait_app(yloom, yarn, name, states, timeout=60):
    return yloom.wait_for(lambda: next((a for a in yarn.apps() if a["name"] == name and
                                        a["state"] in states), None),
                          timeout=timeout, what=f"application {name} to be {states}")


def test_environment_values_reach_the_task_as_they_are(yloom, yarn):
    """YARN's launch script puts values in double quotes unescaped and expands
    {{VAR}} and <CPS> itself: loom's escaping gives the task the spec's
    value. Of the client's environment a container gets loom's variables
    and HADOOP_USER_NAME, not the rest (a ticket cache, a PATH, a secret
    of the shell): launch_container.sh, which log aggregation uploads,
    has none of them either."""
    weird = "a$b\"c`d\\e {{HOME}} <CPS> <LOG_DIR> 'q' $(true) ;x"
    show = ("import os; print('W=' + repr(os.environ['WEIRD'])); "
            "print('E=' + repr(sorted(k for k in os.environ if k in "
            "('KRB5CCNAME', 'CLIENT_ONLY', 'LOOM_CLIENT_KNOB', 'HADOOP_USER_NAME')))); "
            "print('P=' + repr(os.environ.get('VIRTUAL_ENV', '-')))")
    s = yloom.spec(f"""
name: yenvv
backend: yarn
env: {{WEIRD: {json.dumps(weird)}}}
roles:
  worker: {{command: [python3, -c, {json.dumps(show)}]}}
""")
    r = yloom.run("run", s, env={"KRB5CCNAME": "FILE:/tmp/krb5cc_client_only",
                                 "CLIENT_ONLY": "s3cr3t-of-the-shell", "LOOM_CLIENT_KNOB": "1",
                                 "HADOOP_USER_NAME": "root", "VIRTUAL_ENV": "/client/venv"},
                  timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"[worker:0] W={weird!r}" in r.stdout, r.stdout
    assert "[worker:0] E=['HADOOP_USER_NAME', 'LOOM_CLIENT_KNOB']" in r.stdout, r.stdout
    assert "[worker:0] P='-'" in r.stdout, r.stdout
    app = app_of(yarn, "yenvv")["id"]
    scripts = list(yarn.dir.glob(f"nm*/logs/{app}/container_*/launch_container.sh"))
    assert scripts, f"no launch_container.sh of {app} in the NodeManagers' log directories"
    for f in scripts:
        text = f.read_text(errors="replace")
        assert "krb5cc_client_only" not in text and "s3cr3t-of-the-shell" not in text, f


def test_a_gpu_role_runs_on_the_labelled_node(yloom, yarn):
    s = yloom.spec("""
name: ygpu
backend: yarn
roles:
  chief: {memory: 100MiB, command: 'echo NM=$NM_PORT'}
  worker: {gpus: 2, label: gpu, vcores: 2, memory: 1GiB, command: 'echo NM=$NM_PORT'}
""")
    r = yloom.run("run", s, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # nm1 is the node labelled gpu, with 2 GPUs
    assert f"[worker:0] NM={yarn.nm_ports[0]}" in r.stdout, r.stdout
    # what YARN granted, as it granted it: 100 MB rounds up to 64 MB steps
    assert "chief:0: YARN granted 128 MB where 100 MB was asked" in r.stderr, r.stderr
    ev = {e["task"]: e for e in yloom.events() if e["event"] == "container"}
    assert (ev["worker:0"]["gpus"], ev["worker:0"]["vcores"], ev["worker:0"]["memory_mb"]) == \
        (2, 2, 1024), ev
    assert ev["worker:0"]["node"].endswith(f":{yarn.nm_ports[0]}"), ev
    assert (ev["chief:0"]["memory_mb"], ev["chief:0"]["asked_mb"]) == (128, 100), ev
    app = [e for e in yloom.events() if e["event"] == "yarn_application"]
    assert len(app) == 1 and app[0]["application"] == app_of(yarn, "ygpu")["id"], app


def test_gang_deadline_releases_what_was_granted_and_names_what_is_missing(yloom, yarn):
    """Two tasks of 2 vcores on the gpu label, whose one node has 2 vcores: the
    cluster has the vcores (6) and each task fits a node, so the spec passes
    the checks, but one can be granted, never both. Not a hang (TonY #573):
    within LOOM_YARN_GANG_TIMEOUT the granted container goes back and the
    job fails, naming the missing task."""
    s = yloom.spec("""
name: ygang
backend: yarn
roles:
  worker: {instances: 2, vcores: 2, label: gpu, command: 'sleep 5; : yarn-marker'}
""")
    t0 = time.monotonic()
    r = yloom.run("run", s, env={"LOOM_YARN_GANG_TIMEOUT": "4s"}, timeout=60)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(r"YARN granted 1 of 2 containers within 4 s \(LOOM_YARN_GANG_TIMEOUT\); "
                     r"missing: worker:[01] \(512 MB, 2 vcores, 0 GPUs, label gpu, queue default\); "
                     r"the 1 granted were released", r.stderr), r.stderr
    assert took < 20, took
    assert "[worker:" not in r.stdout  # nothing started
    app = final_app(yloom, yarn, "ygang")
    assert app["finalStatus"] == "FAILED" and app["runningContainers"] in (0, -1), app


def test_a_killed_container_is_a_task_failure_for_the_restart_policy(yloom, yarn):
    s = yloom.spec("""
name: yrestart
backend: yarn
restart: task
max_restarts: 2
roles:
  worker: {instances: 2, command: 'echo start $LOOM_INDEX attempt $LOOM_ATTEMPT; sleep 6; : yarn-marker'}
""")
    p = yloom.popen("run", s)
    try:
        yloom.wait_running(timeout=60)
        st = yloom.state()
        agent = next(pid for pid, cmd in loom_procs(yloom.home) if cmd[1:2] == [b"agent"] and
                     b"LOOM_TASK=worker:0" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        os.kill(agent, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 0, err
    assert "[worker:0] start 0 attempt 1" in out, out
    assert "worker:0 agent lost" in err and "restarting it (1 of 2)" in err, err
    assert st["attempt"] == 0


def test_submit_runs_a_managed_application_master_the_client_can_leave(yloom, yarn):
    """`loom submit` returns at once; the coordinator runs in a container YARN
    started (the client is gone), in a job directory of its own there, which
    it publishes to HDFS and, this host seeing the client's, copies into that
    too; status, logs and the RM agree."""
    s = yloom.spec("""
name: ysub
backend: yarn
roles:
  worker: {instances: 2, command: 'echo hello from $LOOM_TASK in $LOOM_JOB_DIR; sleep 2'}
""")
    t0 = time.monotonic()
    r = yloom.run("submit", s, timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert time.monotonic() - t0 < 10
    jd = yloom.home / "jobs" / job
    yj = json.loads((jd / "yarn.json").read_text())
    assert yj["application"].startswith("application_") and yj["conf_dir"] == str(yarn.conf)
    user = os.environ.get("HADOOP_USER_NAME") or pwd.getpwuid(os.getuid()).pw_name
    pub = f"hdfs://127.0.0.1:{yarn.nn_port}/user/{user}/.loom/jobs/{job}"
    assert yj["published"] == pub, yj

    def done():
        st = yloom.run("status", job)
        return "state    succeeded" in st.stdout and st
    st = yloom.wait_for(done, timeout=90, what="the submitted job to succeed")
    assert f"cluster  YARN application {yj['application']} is FINISHED SUCCEEDED" in st.stdout, st.stdout
    logs = yloom.run("logs", job).stdout
    assert "[worker:0] hello from worker:0" in logs and "[worker:1] hello from worker:1" in logs
    # the AM's job directory, as a path that means the same on every node:
    # absolute, in the AM's container
    dirs = set(re.findall(r"hello from worker:\d in (\S+)", logs))
    assert len(dirs) == 1 and re.fullmatch(rf"/\S+/container_\w+/{job}", dirs.pop()), logs
    app = wait_app(yloom, yarn, "ysub", ("FINISHED", "FAILED", "KILLED"))
    assert app["id"] == yj["application"] and app["unmanagedApplication"] is False
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    # the published copy holds the job's end too; this host sees the
    # client's job directory, so the AM wrote it as well and said so
    got = yloom.run("fs", "cat", f"{pub}/state.json")
    assert got.returncode == 0 and json.loads(got.stdout)["state"] == "succeeded", got.stderr
    assert json.loads((jd / "yarn-sync.json").read_text()) == {"mirror": True}
    no_process_left(yloom)


def test_the_secret_is_not_in_what_yarn_shows(yloom, yarn):
    """The ResourceManager's reports of a managed job (its application, the
    attempts, their containers: what `yarn application -status` and the RM's
    web pages show), `ps` on the host while it runs, and the job directory
    hold no part of the job secret (issue 17.3)."""
    from test_security import job_files, leaks, loom_ps_lines, secret_of
    s = yloom.spec("""
name: ysecret
backend: yarn
roles:
  worker: {instances: 2, command: 'sleep 5'}
""")
    r = yloom.run("submit", s, timeout=60)
    assert r.returncode == 0, r.stderr
    jd = yloom.home / "jobs" / r.stdout.strip()
    secret = secret_of(jd)
    app = wait_app(yloom, yarn, "ysecret", ("RUNNING",))
    yloom.wait_for(lambda: yloom.state(jd)["state"] == "running", timeout=60,
                   what="the tasks running")
    seen = [("apps", json.dumps(yarn.rest("apps"))),
            ("app", json.dumps(yarn.rest(f"apps/{app['id']}")))]
    attempts = yarn.rest(f"apps/{app['id']}/appattempts")
    seen.append(("appattempts", json.dumps(attempts)))
    for a in attempts["appAttempts"]["appAttempt"]:
        aid = a.get("appAttemptId") or a.get("id")
        try:
            seen.append((f"containers {aid}",
                         json.dumps(yarn.rest(f"apps/{app['id']}/appattempts/{aid}/containers"))))
        except urllib.error.HTTPError:
            pass  # not every Hadoop serves an attempt's containers
    assert any(app["id"] in t for _, t in seen)
    seen += loom_ps_lines()
    yloom.wait_for(lambda: yloom.state(jd)["state"] == "succeeded", timeout=90,
                   what="the job to succeed")
    seen += job_files(jd)
    assert not leaks(secret, seen), leaks(secret, seen)
    no_process_left(yloom)


def test_a_killed_managed_application_master_is_started_again_and_goes_on(yloom, yarn):
    s = yloom.spec("""
name: yamk
backend: yarn
retries: 1
roles:
  worker: {instances: 2, command: 'echo attempt $LOOM_ATTEMPT; sleep 8; : yarn-marker'}
""")
    r = yloom.run("submit", s, timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    yloom.wait_running(timeout=60)

    def coordinator():
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    cmd = (p / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                # its own job directory in its container, named by the job's id
                if cmd[1:3] == [b"coordinator", job.encode()] and \
                        str(yloom.home).encode() in (p / "environ").read_bytes():
                    return int(p.name)
    first = coordinator()
    assert first
    os.kill(first, signal.SIGKILL)

    def done():
        st = yloom.run("status", job)
        return "state    succeeded" in st.stdout and st
    st = yloom.wait_for(done, timeout=120, what="the job to succeed on the second AM attempt")
    assert "attempt  1 (retries 1)" in st.stdout, st.stdout
    logs = yloom.run("logs", job).stdout
    assert "attempt 1" in logs, logs
    app = wait_app(yloom, yarn, "yamk", ("FINISHED", "FAILED", "KILLED"))
    assert app["finalStatus"] == "SUCCEEDED"
    no_process_left(yloom)
    attempts = yarn.rest(f"apps/{app['id']}/appattempts")["appAttempts"]["appAttempt"]
    assert len(attempts) == 2, attempts


@pytest.mark.skipif(SANITIZED, reason="80 s of waiting for YARN's key roll: runs in the normal pass")
def test_the_amrm_token_rolls_over_during_a_job(yloom, yarn):
    """The script's RM rolls its AMRMToken master key every 31 s (the least it
    allows with a 10 s AM expiry) and activates the new key 15 s later: a
    job of 80 s sees a new token, wherever in the RM's cycle it starts (a
    roll just before it: 31 + 15 s and the next allocate; CI saw a 50 s
    job under load miss it), and authenticates with it."""
    s = yloom.spec("""
name: yroll
backend: yarn
roles:
  worker: {command: 'sleep 80; : yarn-marker'}
""")
    r = yloom.run("run", s, env={"LOOM_LOG": "info:hadoop"}, timeout=180)
    assert r.returncode == 0, r.stderr
    assert re.search(r"info hadoop: appattempt_\d+_\d+_000001: the ResourceManager rolled the "
                     r"AMRMToken \(1 so far\)", r.stderr), r.stderr


def make_stage_sources(d: Path):
    """A file, a directory, a .tar.gz and a .zip, as a job ships them."""
    (d / "dir" / "sub").mkdir(parents=True)
    (d / "one.txt").write_text("file one\n")
    (d / "dir" / "sub" / "x.txt").write_text("in dir\n")
    env = d / "env"
    env.mkdir()
    (env / "mod.py").write_text("print('from the archive')\n")
    subprocess.run(["tar", "-C", str(env), "-czf", str(d / "pyenv.tar.gz"), "mod.py"], check=True)
    subprocess.run(["zip", "-q", str(d / "z.zip"), "mod.py"], cwd=env, check=True)
    return d


def stage_dirs():
    tmp = Path(os.environ.get("TMPDIR") or "/tmp")
    return sorted(tmp.glob("loom-yarn-application_*"))


def test_files_and_archives_are_localized_by_yarn(yloom, yarn, tmp_path):
    """files (a file and a directory) and archives (.tar.gz, .zip) go to a
    staging directory on the cluster's HDFS (its default filesystem),
    reach every container as YARN LocalResources (YARN fetches them from
    HDFS and unpacks the archives), appear at their targets in the task's
    directory, and the staging directory is gone when the job is."""
    src = make_stage_sources(tmp_path / "src")
    before = stage_dirs()
    me = pwd.getpwuid(os.getuid()).pw_name
    staging = f"hdfs://127.0.0.1:{yarn.nn_port}/user/{me}/.loom/staging"
    # a source already on HDFS is localized from where it is, not copied
    remote = f"hdfs://127.0.0.1:{yarn.nn_port}/ystage-src/remote.txt"
    (tmp_path / "remote.txt").write_text("from hdfs\n")
    put = subprocess.run([str(LOOM_BIN), "fs", "put", "-f", str(tmp_path / "remote.txt"), remote],
                         capture_output=True, text=True, timeout=60)
    assert put.returncode == 0, put.stderr
    s = yloom.spec(f"""
name: ystage
backend: yarn
files: {{one.txt: {src}/one.txt, data: {src}/dir, remote.txt: "{remote}"}}
archives: {{pyenv: {src}/pyenv.tar.gz, zipped: {src}/z.zip}}
roles:
  worker:
    instances: 2
    command: "cat one.txt data/sub/x.txt remote.txt; /usr/bin/python3 pyenv/mod.py; ls zipped; readlink pyenv; for d in $({LOOM_BIN} fs ls {staging} | awk '{{print $NF}}'); do {LOOM_BIN} fs ls $d; done"
""")
    r = yloom.run("run", s, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    for w in ("worker:0", "worker:1"):
        for line in ("file one", "in dir", "from the archive", "mod.py", "from hdfs"):
            assert f"[{w}] {line}" in r.stdout, r.stdout
    # while the job ran, the four were in its staging directory on HDFS
    app = app_of(yarn, "ystage")["id"]
    listed = re.findall(rf"\[worker:0\] .* {re.escape(staging)}/{app}/(\d-\S+)$", r.stdout, re.M)
    assert sorted(listed) == ["0-one.txt", "1-dir", "3-pyenv.tar.gz", "4-z.zip"], r.stdout
    # the archive came from the container's directory, where YARN unpacked it
    links = [l for l in r.stdout.splitlines() if l.startswith("[worker:0] ") and "loom-archive" in l]
    assert links and "/appcache/" in links[0], r.stdout
    staged = [e for e in yloom.events() if e["event"] == "files_staged"]
    assert staged and set(staged[0]["files"]) == {"one.txt", "data", "remote.txt", "pyenv",
                                                  "zipped"}, staged
    assert stage_dirs() == before  # nothing staged on this host's filesystem
    left = subprocess.run([str(LOOM_BIN), "fs", "ls", f"{staging}/{app}"], capture_output=True,
                          text=True, timeout=30)
    assert left.returncode == 1 and "no such file or directory" in left.stderr, left


normal_pass_only = pytest.mark.skipif(
    SANITIZED, reason="a training job under ASan takes minutes; runs in the normal pass")


@normal_pass_only
def test_the_pytorch_ddp_example_on_yarn(yloom, yarn):
    """test_torch's unmodified DDP script (gloo, env://), 6 processes in 3
    containers, all_reduce results as on the local backend."""
    py, script = "/usr/bin/python3", Path(__file__).with_name("ddp_allreduce.py")
    s = yloom.spec(f"""
name: yddp
backend: yarn
env: {{OMP_NUM_THREADS: "1"}}
roles:
  chief: {{procs: 2, memory: 1GiB, command: [{py}, {script}]}}
  worker: {{instances: 2, procs: 2, memory: 1GiB, command: [{py}, {script}]}}
""")
    r = yloom.run("run", s, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "DDP rank=" in l]
    assert len(lines) == 6, r.stdout
    world = 6
    for l in lines:
        m = re.search(r"DDP rank=(\d+) world=(\d+) local=(\d) sum=\[(.*)\] max=([\d.]+)", l)
        assert m and int(m[2]) == world, l
        assert [float(x) for x in m[4].split(",")] == \
            [world * i + world * (world - 1) / 2 for i in range(5)], l
    assert sorted(int(re.search(r"rank=(\d+)", l)[1]) for l in lines) == list(range(world))
    assert final_app(yloom, yarn, "yddp")["finalStatus"] == "SUCCEEDED"


@normal_pass_only
def test_the_fashion_mnist_example_on_yarn(yloom, yarn):
    """examples/fashion-mnist/job.yaml as shipped, with --backend yarn: the C
    MLP, 1 chief + 3 workers of 1 GiB each, to its accuracy target."""
    from test_fashion import ACCURACY_TARGET, EXAMPLE_SPEC, MLP, last_json, load_params
    spec = EXAMPLE_SPEC
    text = EXAMPLE_SPEC.read_text()
    shipped = "../../build/examples/fashion-mnist/mlp"
    if MLP != (ROOT / "build" / "examples" / "fashion-mnist" / "mlp").resolve():
        spec = yloom.spec(text.replace(shipped, str(MLP)))
    r = yloom.run("run", "--backend", "yarn", spec, env={"OPENBLAS_NUM_THREADS": "1"},
                  timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = last_json(r.stdout + r.stderr)
    assert res["world_size"] == 4 and res["test_accuracy"] >= ACCURACY_TARGET, res
    load_params(yloom.job_dir() / "tasks" / "chief-0" / "mlp.params")
    app = final_app(yloom, yarn, "fashion-mlp")
    assert (app["finalStatus"], app["unmanagedApplication"]) == ("SUCCEEDED", True)
    containers = [e for e in yloom.events() if e["event"] == "container"]
    assert len(containers) == 4 and all(e["memory_mb"] == 1024 for e in containers), containers


def test_a_lost_node_manager_is_a_lost_task_that_comes_back_elsewhere(yloom, yarn):
    """It kills a NodeManager (SIGKILL; its containers' processes live on,
    orphaned). The RM declares the node lost (10 s here), loom drops the
    tasks that were there and starts them on the other node. The cluster is
    the run's shared one: the NodeManager is started again afterwards."""
    s = yloom.spec("""
name: ynm
backend: yarn
restart: task
max_restarts: 2
roles:
  worker: {instances: 2, command: 'echo on $NM_PORT attempt $LOOM_ATTEMPT; sleep 25; : yarn-marker'}
""")
    p = yloom.popen("run", s)
    nm = None
    try:
        yloom.wait_running(timeout=60)
        agent = next(pid for pid, cmd in loom_procs(yloom.home) if cmd[1:2] == [b"agent"])
        env = dict(l.split("=", 1) for l in
                   Path(f"/proc/{agent}/environ").read_text().split("\0") if "=" in l)
        nm = yarn.nm_ports.index(int(env["NM_PORT"]))
        os.kill(int((yarn.dir / "pids" / f"nm{nm + 1}.pid").read_text()), signal.SIGKILL)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        if nm is not None:
            yarn.script("nodemanager", "start", nm + 1, timeout=200)
    assert p.returncode == 0, err
    assert "Container released on a *lost* node" in err, err
    other = yarn.nm_ports[1 - nm]
    assert f"on {other} attempt 1" in out, out
    assert err.count("restarting it (1 of 2)") >= 1 and "(2 of 2)" not in err, err
