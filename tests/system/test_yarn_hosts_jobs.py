"""Real loom jobs on YARN and HDFS whose hosts are really apart (conftest's
hadoop_hosts: the ResourceManager and the NameNode on one network
namespace, a NodeManager and a DataNode on each of two more, in mount
namespaces that hide the checkout, the build, the Python environments and
libuv, libyaml, jansson and protobuf-c; the client is this process, at
h.addrs["client"]). `loom run --backend yarn --bind CLIENT` from the
client: the coordinator listens where the nodes reach it, every agent runs
the loom that YARN localized from the HDFS cache (the build is hidden on
the nodes: a job that runs at all was shipped), a task runs what the node
has (/usr/bin/python3 with Debian's torch) and what the spec's `files:`
ship. The four-role environment, PyTorch DDP across the nodes, a feed
from HDFS with exactly-once output, a failing task, `loom kill`, a
NodeManager killed mid-job, and the binary cache."""
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import clusters
from conftest import BUILD, LIBLOOM, LOOM, ROOT, pylib_env
from netns import ip

NODES = (1, 2)
SHA = hashlib.sha256(LOOM.read_bytes()).hexdigest()
SIZE = LOOM.stat().st_size
LIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")


def apps(h):
    return (h.rest("apps").get("apps") or {}).get("app") or []


def app_named(h, name):
    found = [a for a in apps(h) if a["name"] == name]
    assert len(found) == 1, found
    return found[0]


def final_app(hloom, h, name):
    """The application's report once it is in a final state (with the RM's
    recovery on, a moment after the AM unregistered: the state store has
    it first)."""
    return hloom.wait_for(lambda: (lambda a: a["state"] not in LIVE and a)(app_named(h, name)),
                          timeout=30, what=f"application {name} to reach a final state")


def node_job_procs(h, home):
    """{pid: command line} of the processes in the nodes' network
    namespaces whose environment names this test's LOOM_HOME: the agents
    and tasks of its jobs, wherever YARN put them."""
    out = {}
    for n in NODES:
        for p in ip("netns", "pids", h.ns[f"node{n}"], check=False).split():
            try:
                env = Path(f"/proc/{p}/environ").read_bytes()
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            if str(home).encode() in env and stat.rsplit(")", 1)[1].split()[0] != "Z":
                out[int(p)] = b" ".join(cmd).decode(errors="replace")
    return out


def both_nodes_running(h):
    nodes = h.rest("nodes")["nodes"]["node"]
    return sorted(n["state"] for n in nodes) == ["RUNNING", "RUNNING"]


@pytest.fixture
def hloom(loom, hadoop_hosts):
    """loom with the cluster's HADOOP_CONF_DIR, as the client's user. After
    the test: no application of it live, no process of its jobs on a node."""
    h = hadoop_hosts
    loom.env["HADOOP_CONF_DIR"] = str(h.conf)
    loom.env.pop("HADOOP_USER_NAME", None)
    loom.wait_for(lambda: both_nodes_running(h), timeout=120, what="both NodeManagers RUNNING")
    yield loom
    # the RM's report moves to a final state once its state store has it
    loom.wait_for(lambda: not [a for a in apps(h) if a["state"] in LIVE], timeout=30,
                  what="no application of the test live: " +
                  str([(a["name"], a["state"]) for a in apps(h) if a["state"] in LIVE]))
    end, left = time.time() + 30, None
    while time.time() < end:
        left = node_job_procs(h, loom.home)
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"processes of the test's jobs left on the nodes: {left}"


def run(hloom, h, spec, *args, timeout=120, env=None):
    """`loom run --backend yarn --bind CLIENT SPEC`."""
    return hloom.run("run", "--backend", "yarn", "--bind", h.addrs["client"], *args, spec,
                     timeout=timeout, env=env)


# What a task runs with the node's own /usr/bin/python3 (shipped with the
# spec's files:): one line "PROBE {json}" of its environment's loom and
# framework variables, its host, and the agent it runs under (the first
# ancestor `... agent`: its argv[0], its executable, its directory).
PROBE = r"""
import json, os, socket
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TF_CONFIG", "NM_HOST", "CONTAINER_ID")
out = {k: v for k, v in os.environ.items() if k in keys or k.startswith("LOOM_")}
out["hostname"] = socket.gethostname()
pid = os.getppid()
while pid > 1:
    cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    if cmd[1:2] == [b"agent"]:
        out["agent"] = {"argv0": cmd[0].decode(), "exe": os.readlink(f"/proc/{pid}/exe"),
                        "cwd": os.readlink(f"/proc/{pid}/cwd")}
        break
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
out["secret"] = len(out.pop("LOOM_SECRET", ""))
print("PROBE " + json.dumps(out, sort_keys=True), flush=True)
"""


# The ps, after its probe: listens on its task port until stopped.
SERVE = r"""
import os, socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(os.environ["LOOM_PORT"])))
s.listen(16)
while True:
    s.accept()[0].close()
"""

# The chief, after its probe: waits (90 s at most) until the ps listens.
WAIT_PS = r"""
import json, os, socket, sys, time
host, port = json.loads(os.environ["LOOM_CLUSTER"])["ps"][0].rsplit(":", 1)
end = time.monotonic() + 90
while True:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        break
    except OSError:
        if time.monotonic() > end:
            sys.exit(f"the ps at {host}:{port} never listened")
        time.sleep(0.1)
"""


def probes(stdout):
    """{(task, LOCAL_RANK): what PROBE printed}; a task of several procs
    prefixes each proc's lines [role:index.proc]."""
    out = {}
    for m in re.finditer(r"^\[(\w+:\d+)(?:\.(\d+))?\] PROBE (\{.*\})$", stdout, re.M):
        seen = json.loads(m[3])
        key = (m[1], seen["LOCAL_RANK"])
        assert m[2] in (None, key[1]) and key not in out, (key, m[0])
        out[key] = seen
    return out


def test_every_role_sees_the_cluster_of_the_nodes(hloom, hadoop_hosts, tmp_path):
    """chief, 2 workers of 2 procs, ps and evaluator, each asking for 1 GiB
    so that no one node holds them all: TF_CONFIG, LOOM_CLUSTER and the
    torch variables name the nodes' addresses, exactly, each task's its own
    container's node; LOOM_COORD is the client; every agent ran the
    ./loom YARN localized into its container on that node. The ps, a
    service, listens on its port once it has printed, and the chief waits
    for that before it ends (the ps is stopped when the rest have ended:
    under load that came before its probe printed)."""
    h = hadoop_hosts
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    (tmp_path / "serve.py").write_text(SERVE)
    (tmp_path / "waitps.py").write_text(WAIT_PS)
    py = "/usr/bin/python3 probe.py"
    s = hloom.spec(f"""
name: hostsenv
backend: yarn
files: {{probe.py: {probe}, serve.py: {tmp_path / "serve.py"}, waitps.py: {tmp_path / "waitps.py"}}}
roles:
  chief: {{memory: 1GiB, command: '{py} && /usr/bin/python3 waitps.py'}}
  worker: {{instances: 2, procs: 2, memory: 1GiB, command: '{py}'}}
  ps: {{memory: 1GiB, command: '{py}; exec /usr/bin/python3 serve.py'}}
  evaluator: {{memory: 1GiB, command: '{py}'}}
""")
    r = run(hloom, h, s, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = probes(r.stdout)
    assert sorted(seen) == sorted([("chief:0", "0"), ("ps:0", "0"), ("evaluator:0", "0")] +
                                  [(f"worker:{i}", str(p)) for i in range(2) for p in range(2)]), \
        r.stdout
    nodes = {h.addrs[f"node{n}"]: n for n in NODES}
    chief = seen[("chief:0", "0")]
    w = {(i, p): seen[(f"worker:{i}", str(p))] for i in range(2) for p in range(2)}
    ps, ev = seen[("ps:0", "0")], seen[("evaluator:0", "0")]
    host = {}  # task -> the address of its container's node
    for (task, _), e in seen.items():
        assert e["NM_HOST"] in nodes, e
        n = nodes[e["NM_HOST"]]
        assert e["hostname"] == f"loom-node{n}", e
        assert host.setdefault(task, e["NM_HOST"]) == e["NM_HOST"], (task, e)
        # the coordinator: on the client; the secret: there, never printed
        assert e["LOOM_COORD"].startswith(h.addrs["client"] + ":"), e
        assert e["secret"] == 64 and e["LOOM_TASK"] == task, e
        # its agent: the ./loom YARN localized from the cache into the
        # container's directory on that node, byte for byte the build's
        a = e["agent"]
        assert a["argv0"] == "./loom", a
        assert a["exe"].startswith(f"{h.dir}/nm{n}/local/usercache/") and \
            "/filecache/" in a["exe"] and a["exe"].endswith("/loom"), a
        assert a["cwd"].endswith(f"/{e['CONTAINER_ID']}"), a
        assert hashlib.sha256(Path(a["exe"]).read_bytes()).hexdigest() == SHA, a
    # 5 GiB asked, the larger node has 4: both nodes ran tasks
    assert set(host.values()) == set(nodes), host
    # ranks: chief, then the workers' procs
    assert chief["RANK"] == "0" and chief["LOOM_RANK"] == "0"
    assert [w[(i, p)]["RANK"] for i in range(2) for p in range(2)] == ["1", "2", "3", "4"]
    assert {e["WORLD_SIZE"] for e in [chief, *w.values()]} == {"5"}
    assert w[(1, 1)]["LOCAL_RANK"] == "1" and w[(1, 1)]["LOCAL_WORLD_SIZE"] == "2"
    assert "RANK" not in ps and "RANK" not in ev
    # the cluster: each task at its own node's address
    cluster = json.loads(chief["LOOM_CLUSTER"])
    assert sorted(cluster) == ["chief", "evaluator", "ps", "worker"], cluster
    for role, hps in cluster.items():
        assert [hp.rsplit(":", 1)[0] for hp in hps] == \
            [host[f"{role}:{i}"] for i in range(len(hps))], (role, hps, host)
    ports = [hp for hps in cluster.values() for hp in hps]
    assert len(set(ports)) == 5, cluster
    # MASTER_ADDR: the chief's node (not the client's address), for all
    assert chief["MASTER_ADDR"] == host["chief:0"] != h.addrs["client"]
    assert f'{chief["MASTER_ADDR"]}:{chief["MASTER_PORT"]}' == cluster["chief"][0]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in w.values()} == \
        {(chief["MASTER_ADDR"], chief["MASTER_PORT"])}
    # TF_CONFIG exactly; the evaluator outside the cluster
    for (i, p), e in w.items():
        assert json.loads(e["TF_CONFIG"]) == {
            "cluster": {"chief": cluster["chief"], "worker": cluster["worker"],
                        "ps": cluster["ps"]},
            "task": {"type": "worker", "index": i}}, e
    assert json.loads(ps["TF_CONFIG"])["task"] == {"type": "ps", "index": 0}
    tfe = json.loads(ev["TF_CONFIG"])
    assert tfe == {"cluster": {"chief": cluster["chief"], "worker": cluster["worker"],
                               "ps": cluster["ps"]},
                   "task": {"type": "evaluator", "index": 0}}, tfe
    st = hloom.state()
    assert {t["task"]: t["state"] for t in st["tasks"]} == {
        "chief:0": "succeeded", "worker:0": "succeeded", "worker:1": "succeeded",
        "ps:0": "stopped", "evaluator:0": "succeeded"}, st
    app = final_app(hloom, h, "hostsenv")
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app


def test_pytorch_ddp_across_the_nodes(hloom, hadoop_hosts):
    """tests/system/ddp_allreduce.py, unmodified, shipped with files: and
    run by the node's own /usr/bin/python3 and its Debian python3-torch:
    two workers of 2.5 GiB, which no one node holds both of, all_reduce
    over gloo between the nodes. Debian's torch links libuv (a dependency
    of the package on a real node), which the harness hides as a library
    a stock node lacks: the job ships it too (files:, LD_LIBRARY_PATH)."""
    h = hadoop_hosts
    from subprocess import run as sprun
    torch = "/usr/lib/python3/dist-packages/torch/__init__.py"
    seen = sprun(h.on_node(1, "/usr/bin/python3", "-c",
                           f"import os; print(os.path.isfile('{torch}')); import torch"),
                 capture_output=True, text=True, timeout=120)
    assert (seen.returncode, seen.stdout) == (1, "True\n"), seen
    assert "libuv.so.1: file too short" in seen.stderr, seen.stderr
    libuv = Path("/lib/x86_64-linux-gnu/libuv.so.1").resolve()
    script = Path(__file__).with_name("ddp_allreduce.py")
    s = hloom.spec(f"""
name: hostsddp
backend: yarn
files: {{ddp.py: {script}, libuv.so.1: {libuv}}}
# gloo binds the address the host's name resolves to, which on these
# nodes (Debian's /etc/hosts) is 127.0.1.1: without its interface named,
# rank 1 is told to connect to 127.0.1.1 and is refused. loom names it
# (GLOO_SOCKET_IFNAME: the interface the task is published at, lan0)
env: {{OMP_NUM_THREADS: "1"}}
roles:
  worker:
    instances: 2
    memory: 2560MiB
    command: 'echo on $NM_HOST $GLOO_SOCKET_IFNAME $NCCL_SOCKET_IFNAME; LD_LIBRARY_PATH=$PWD exec /usr/bin/python3 ddp.py'
""")
    r = run(hloom, h, s, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(re.findall(r"^\[worker:\d\] on \S+ lan0 lan0$", r.stdout, re.M)) == 2, r.stdout
    on = dict(re.findall(r"^\[(worker:\d)\] on (\S+)", r.stdout, re.M))
    assert sorted(on.values()) == sorted(h.addrs[f"node{n}"] for n in NODES), r.stdout
    lines = re.findall(r"^\[(worker:\d)\] DDP rank=(\d) world=(\d) local=0 sum=\[(.*)\] "
                       r"max=([\d.]+) grad=(\S+)$", r.stdout, re.M)
    assert sorted((t, int(rank)) for t, rank, *_ in lines) == [("worker:0", 0), ("worker:1", 1)], \
        r.stdout
    for _, _, world, sums, mx, grad in lines:
        assert world == "2" and float(mx) == 1.0
        assert [float(x) for x in sums.split(",")] == [2 * i + 1 for i in range(5)], sums
        # the DDP gradient: the mean of the ranks' (2 rows of rank + 1)
        assert float(grad) == pytest.approx(3.0), grad
    app = final_app(hloom, h, "hostsddp")
    assert app["finalStatus"] == "SUCCEEDED", app


def fs(hloom, *args):
    r = hloom.run("fs", *args, timeout=120)
    assert r.returncode == 0, (args, r.stderr)
    return r


def test_a_feed_from_hdfs_is_read_on_the_nodes_and_written_exactly_once(hloom, hadoop_hosts):
    """Input put with `loom fs put` on the cluster's HDFS; the feed probe
    (the build's examples/feed-probe and its libloom.so, shipped with
    files:) reads it in three workers on the nodes and writes part files
    there: every record exactly once, every split committed, each read
    where its blocks are (both DataNodes hold every block)."""
    h = hadoop_hosts
    base = f"/hosts-feed-{os.getpid()}"
    want = []
    for i in range(2):
        recs = [f"h{i}-{j:06d}-" + "x" * (j % 37) for j in range(20_000)]
        want += recs
        local = hloom.tmp / f"in-{i}.txt"
        local.write_text("".join(r + "\n" for r in recs))
        fs(hloom, "put", local, h.url(f"{base}/in/in-{i}.txt"))
    # the probe needs libloom.so, which needs glibc and its libloom-deps/
    # (found by its $ORIGIN run path): shipped beside it
    probe = BUILD / "examples/feed-probe/feedprobe"
    lib = (BUILD / "libloom.so.0").resolve()
    s = hloom.spec(f"""
name: hostsfeed
backend: yarn
files: {{feedprobe: {probe}, libloom.so.0: {lib}, libloom-deps: {BUILD / "libloom-deps"}}}
roles:
  worker: {{instances: 3, command: 'LD_LIBRARY_PATH=$PWD exec ./feedprobe --batch 16'}}
feed: {{input: ["{h.url(base)}/in/in-*"], format: lines, output: "{h.url(base)}/out"}}
""")
    try:
        r = run(hloom, h, s, env={"LOOM_FEED_SPLIT_BYTES": "100000"}, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        st = hloom.state()["feed"]
        assert st["finished"] and st["committed"] == st["splits"] >= 8, st
        assert st["data_local"] >= st["splits"], st
        ls = fs(hloom, "ls", h.url(f"{base}/out")).stdout.splitlines()
        parts = [l.split()[-1] for l in ls if re.search(r"/part-\d{5}$", l)]
        assert parts and not any("/.tmp" in l for l in ls), ls
        got = fs(hloom, "cat", *parts).stdout.splitlines()
        assert all(l.startswith("out:") for l in got), got[:5]
        got = [l[4:] for l in got]
        assert len(got) == len(want) and sorted(got) == sorted(want)
    finally:
        hloom.run("fs", "rm", "-r", h.url(base))


def test_a_failing_task_fails_the_job_with_its_cause_and_log_url(hloom, hadoop_hosts):
    """A task that exits 1 on a node: `loom run` exits 1, names the root
    cause with the tail of its stderr and the task's container log URL on
    its node's NodeManager (which serves that stderr); its peer is
    stopped; YARN's application ends FAILED with the cause as its
    diagnostics."""
    h = hadoop_hosts
    s = hloom.spec("""
name: hostsfail
backend: yarn
retries: 0
roles:
  worker: {instances: 2, command: 'if [ $LOOM_INDEX = 1 ]; then echo dying on $NM_HOST >&2; exit 1; fi; sleep 60'}
""")
    t0 = time.monotonic()
    r = run(hloom, h, s, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert "root cause: worker:1 (attempt 0) exited with code 1" in r.stderr, r.stderr
    m = re.search(r"^  \| dying on (\S+)$", r.stderr, re.M)
    assert m and m[1] in (h.addrs["node1"], h.addrs["node2"]), r.stderr
    node = m[1]
    n = 1 if node == h.addrs["node1"] else 2
    app = final_app(hloom, h, "hostsfail")
    url = re.search(r"^loom: worker:1's container logs: (\S+)$", r.stderr, re.M)
    assert url, r.stderr
    user = pwd.getpwuid(os.getuid()).pw_name
    cid = app["id"].replace("application_", "container_")
    assert re.fullmatch(rf"http://{re.escape(node)}:\d+/node/containerlogs/{cid}_01_\d{{6}}/"
                        rf"{user}", url[1]), (url[1], node, cid)
    # that container's log directory on that node holds the task's stderr
    # (what the URL serves while the application runs; once it ended, the
    # cluster's log aggregation has them on HDFS)
    container = url[1].rsplit("/", 2)[1]
    stderr = h.dir / f"nm{n}" / "logs" / app["id"] / container / "stderr"
    assert f"dying on {node}" in stderr.read_text(), stderr
    assert took < 60, took
    st = hloom.state()
    assert (st["state"], st["exit_status"]) == ("failed", 1), st
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "FAILED"), app
    assert "worker:1 (attempt 0) exited with code 1" in app["diagnostics"], app


def test_a_container_killed_on_a_node_fails_the_job_with_yarns_diagnostics(hloom,
                                                                          hadoop_hosts):
    """worker:1's agent SIGKILLed on its node (its container dies): with
    retries: 0 `loom run` exits 1 and the root cause is YARN's own account
    of that container (its id, exit status 137, the NodeManager's
    diagnostics), with the container's log URL on that node; YARN's
    application ends FAILED with the same diagnostics."""
    h = hadoop_hosts
    s = hloom.spec("""
name: hostslost
backend: yarn
retries: 0
roles:
  worker: {instances: 2, command: 'exec sleep 60'}
""")
    p = hloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        hloom.wait_running(timeout=90)
        procs = hloom.wait_for(lambda: (lambda d: len(
            [c for c in d.values() if c.startswith("./loom agent")]) == 2 and d)(
                node_job_procs(h, hloom.home)), timeout=30, what="both agents on the nodes")
        agent = next(pid for pid, c in procs.items() if c.startswith("./loom agent") and
                     b"LOOM_TASK=worker:1" in
                     Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        env = dict(l.split("=", 1) for l in
                   Path(f"/proc/{agent}/environ").read_text().split("\0") if "=" in l)
        os.kill(agent, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 1, out + err
    cid, node = env["CONTAINER_ID"], env["NM_HOST"]
    assert node in (h.addrs["node1"], h.addrs["node2"]), env
    m = re.search(r"^loom: root cause: worker:1 \(attempt 0\) agent lost: (.*)$", err, re.M)
    assert m, err
    assert f"YARN container {cid}: exit status 137: " in m[1], m[1]
    assert "Container killed on request. Exit code is 137" in m[1], m[1]
    assert re.search(rf"^loom: worker:1's container logs: http://{re.escape(node)}:\d+/node/"
                     rf"containerlogs/{cid}/{pwd.getpwuid(os.getuid()).pw_name}$", err, re.M), err
    app = final_app(hloom, h, "hostslost")
    assert app["finalStatus"] == "FAILED", app
    assert f"YARN container {cid}: exit status 137" in app["diagnostics"], app


def test_a_task_s_processes_end_with_its_killed_container(hloom, hadoop_hosts):
    """The agent of a task whose command is a shell with a child (`sleep`
    under `sh -c`) SIGKILLed on its node: within seconds nothing of the
    task runs on the node any more. The task runs in a session of its own,
    which the NodeManager's kill of the container's process group misses:
    the parent-death signal ends the shell, the guard `loom __exec` left in
    the task's session (src/agent/exec.c) the `sleep`."""
    h = hadoop_hosts
    s = hloom.spec("""
name: hostsorphan
backend: yarn
retries: 0
roles:
  worker: {command: 'sleep 60; echo never'}
""")
    p = hloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        hloom.wait_running(timeout=90)
        procs = hloom.wait_for(lambda: (lambda d: [pid for pid, c in d.items()
                                                   if c.startswith("./loom agent")])(
            node_job_procs(h, hloom.home)), timeout=30, what="the agent on its node")
        os.kill(procs[0], signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 1, out + err
        end, left = time.time() + 15, None
        while time.time() < end:
            left = node_job_procs(h, hloom.home)
            if not left:
                break
            time.sleep(0.1)
        assert not left, f"left on the node after its container was killed: {left}"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        for pid in node_job_procs(h, hloom.home):  # what a failure leaves, for the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_loom_kill_leaves_nothing_on_the_nodes(hloom, hadoop_hosts):
    """`loom kill JOB` from another command on the client while the job
    runs on both nodes: `loom run` exits 130, the application is not
    RUNNING, and no agent or task of it is left in a node's namespaces."""
    h = hadoop_hosts
    s = hloom.spec("""
name: hostskill
backend: yarn
roles:
  worker: {instances: 2, memory: 2560MiB, command: 'sleep 300'}
  ps: {command: 'sleep 300'}
""")
    p = hloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    try:
        hloom.wait_running(timeout=90)
        procs = hloom.wait_for(lambda: (lambda d: len(
            [c for c in d.values() if c.startswith("./loom agent")]) == 3 and d)(
                node_job_procs(h, hloom.home)), timeout=30, what="3 agents on the nodes")
        on = {netns for pid in procs for netns in [ip("netns", "identify", str(pid)).strip()]}
        assert on == {h.ns["node1"], h.ns["node2"]}, on
        k = hloom.run("kill", hloom.job_dir().name, timeout=30)
        assert k.returncode == 0, k.stderr
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, out + err
    hloom.wait_for(lambda: hloom.state()["state"] == "killed", timeout=20, what="state killed")
    # the RM's report moves to the final state a moment after the AM
    # unregistered
    app = final_app(hloom, h, "hostskill")
    assert app["finalStatus"] == "KILLED", app
    hloom.wait_for(lambda: not node_job_procs(h, hloom.home), timeout=20,
                   what="the job's agents and tasks on the nodes to end")


def test_a_nodemanager_killed_mid_job_its_task_comes_back_on_the_other_node(hloom,
                                                                            hadoop_hosts):
    """SIGKILL to the NodeManager that runs worker:0: the RM declares the
    node lost (10 s), loom starts the task again on the other node
    (restart: task), the job succeeds. The NodeManager is started again
    on its host afterwards."""
    h = hadoop_hosts
    s = hloom.spec("""
name: hostsnm
backend: yarn
restart: task
max_restarts: 2
roles:
  worker: {instances: 2, command: 'echo on $NM_HOST attempt $LOOM_ATTEMPT; if [ $LOOM_ATTEMPT = 0 ]; then sleep 40; fi'}
""")
    p = hloom.popen("run", "--backend", "yarn", "--bind", h.addrs["client"], s)
    killed = None
    try:
        hloom.wait_running(timeout=90)
        procs = hloom.wait_for(lambda: (lambda d: len(
            [c for c in d.values() if c.startswith("./loom agent")]) == 2 and d)(
                node_job_procs(h, hloom.home)), timeout=30, what="both agents on the nodes")
        agent0 = next(pid for pid, c in procs.items() if c.startswith("./loom agent") and
                      b"LOOM_TASK=worker:0" in
                      Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        ns = ip("netns", "identify", str(agent0)).strip()
        killed = next(n for n in NODES if h.ns[f"node{n}"] == ns)
        os.kill(h.pid(f"nm{killed}"), signal.SIGKILL)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        if killed is not None:
            h.script("nodemanager", "start", killed, timeout=200)
    assert p.returncode == 0, out + err
    assert "Container released on a *lost* node" in err, err
    lost, other = h.addrs[f"node{killed}"], h.addrs[f"node{3 - killed}"]
    assert f"[worker:0] on {lost} attempt 0" in out, out
    # every task that was on the lost node came back on the other one
    back = re.findall(r"^\[(worker:\d)\] on (\S+) attempt 1$", out, re.M)
    assert ("worker:0", other) in back and all(a == other for _, a in back), out
    assert "(2 of 2)" not in err, err
    assert hloom.state()["state"] == "succeeded"
    hloom.wait_for(lambda: both_nodes_running(h), timeout=120,
                   what=f"nm{killed} back RUNNING")


def dn_bytes_written(h):
    return clusters.dn_bytes_written(
        f"{h.addrs[f'node{n}']}:{h.ports()[f'dn{n}-web']}" for n in NODES)


def settled_bytes(hloom, h, tag):
    """dn_bytes_written once it counts everything written before: a marker
    of its own size is put, and the count read until it has grown by that
    (the DataNodes' metrics reach JMX on their own period)."""
    marker = hloom.tmp / f"marker-{tag}"
    marker.write_bytes(os.urandom(4096 + 7))
    before = dn_bytes_written(h)
    fs(hloom, "put", "-f", marker, h.url(f"/hosts-ship-{os.getpid()}/{tag}"))
    return hloom.wait_for(lambda: (lambda v: v >= before + marker.stat().st_size and v)(
        dn_bytes_written(h)), timeout=60, what="the DataNodes' metrics to count the marker")


def test_the_second_job_uploads_no_binary(hloom, hadoop_hosts):
    """With the cache emptied, the first job stages loom (the DataNodes
    count at least its size written); the second finds it and writes
    nothing of it; both run on the nodes."""
    h = hadoop_hosts
    user = pwd.getpwuid(os.getuid()).pw_name
    cache = h.url(f"/user/{user}/.loom/cache/{SHA}")
    hloom.run("fs", "rm", "-r", cache)
    assert hloom.run("fs", "stat", cache).returncode == 1
    s = hloom.spec("""
name: hostscache
backend: yarn
roles:
  worker: {instances: 1, command: 'echo ran on $NM_HOST'}
""")
    counts, took = [], []
    try:
        for k in range(2):
            before = settled_bytes(hloom, h, f"before{k}")
            r = run(hloom, h, s, timeout=120)
            assert r.returncode == 0, r.stderr
            m = re.search(r"^\[worker:0\] ran on (\S+)$", r.stdout, re.M)
            assert m and m[1] in (h.addrs["node1"], h.addrs["node2"]), r.stdout
            after = settled_bytes(hloom, h, f"after{k}")
            counts.append(after - before)
            jd = max(hloom.jobs(), key=lambda d: d.stat().st_mtime)
            ev = [e for e in hloom.events(jd) if e.get("event") == "binary_shipped"]
            assert len(ev) == 1, ev
            assert ev[0]["path"] == f"{cache}/loom" and ev[0]["sha256"] == SHA, ev
            assert ev[0]["uploaded"] == (SIZE if k == 0 else 0), ev
            assert ("uploaded" if k == 0 else "cached already") in r.stderr, r.stderr
            took.append(ev[0]["ms"])
    finally:
        hloom.run("fs", "rm", "-r", h.url(f"/hosts-ship-{os.getpid()}"))
    assert counts[0] >= SIZE, (counts, SIZE)
    assert counts[1] < SIZE // 10, (counts, SIZE)
    print(f"\nacross the hosts, bytes written to HDFS: first job {counts[0]}, second "
          f"{counts[1]} (binary {SIZE}); staging took {took[0]} ms, then {took[1]} ms")


def submit(hloom, name, command):
    """`loom submit` of a job named name of 2 workers running command (its
    managed application master on a node): the job's id."""
    s = hloom.spec(f"""
name: {name}
backend: yarn
roles:
  worker: {{instances: 2, command: '{command}'}}
""")
    r = hloom.run("submit", "--backend", "yarn", s, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_submit_runs_its_application_master_on_a_node(hloom, hadoop_hosts):
    """`loom submit` from the client: the managed application master runs
    in a container on a node, in a job directory of its own there (the
    client's is on the client only), the client can leave, the job succeeds
    and `loom status` and `loom logs` say so from what the application
    master published in HDFS (/user/<user>/.loom/jobs/<id>/, its owner's
    only)."""
    h = hadoop_hosts
    job = submit(hloom, "hostssub", "echo hello from $LOOM_TASK on $NM_HOST")
    jd = hloom.home / "jobs" / job
    user = pwd.getpwuid(os.getuid()).pw_name
    pub = h.url(f"/user/{user}/.loom/jobs/{job}")
    assert json.loads((jd / "yarn.json").read_text())["published"] == pub
    app = hloom.wait_for(lambda: (lambda a: a["state"] in ("FINISHED", "FAILED", "KILLED") and a)(
        app_named(h, "hostssub")), timeout=90, what="the application to end")
    # the AM's own output, in its container's log directory on its node
    am_log = "".join(p.read_text() for p in h.dir.glob(
        f"nm*/logs/{app['id']}/container_*_01_000001/coordinator.log"))
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), \
        (app["diagnostics"], am_log)
    assert app["amHostHttpAddress"].split(":")[0] in (h.addrs["node1"], h.addrs["node2"]), app
    # nothing of the job came into the client's directory but through loom
    assert not (jd / "state.json").exists()
    st = hloom.run("status", job)
    assert "state    succeeded" in st.stdout, st.stdout
    assert f"cluster  YARN application {app['id']} is FINISHED SUCCEEDED" in st.stdout, st.stdout
    logs = hloom.run("logs", job).stdout
    assert re.search(r"\[worker:0\] hello from worker:0 on 10\.", logs), logs
    assert re.search(r"\[worker:1\] hello from worker:1 on 10\.", logs), logs
    # the coordinator ran on the node: its address there, its log beside
    coord = json.loads((jd / "coord.json").read_text())
    assert coord["addr"].rsplit(":", 1)[0] in (h.addrs["node1"], h.addrs["node2"]), coord
    assert "job_started" in (jd / "events.jsonl").read_text()
    # the published copy is its owner's only, and holds the spec it ran
    ls = hloom.run("fs", "ls", h.url(f"/user/{user}/.loom/jobs"))
    assert ls.returncode == 0, ls.stderr
    line = [l for l in ls.stdout.splitlines() if l.rstrip().endswith(job)]
    assert line and line[0].startswith("drwx------"), ls.stdout
    assert hloom.run("fs", "cat", f"{pub}/spec.yaml").stdout == (jd / "spec.yaml").read_text()


def test_submit_status_and_kill_from_the_client(hloom, hadoop_hosts):
    """A submitted job whose application master runs on a node: `loom
    status` shows its tasks running there, `loom kill` stops it through the
    coordinator (its address and the job's secret, which the client holds),
    and the job ends killed, with nothing left on the nodes."""
    h = hadoop_hosts
    job = submit(hloom, "hostssubkill",
                 'trap "echo stopping $LOOM_TASK; exit 0" TERM; echo up; sleep 300 & wait')

    def running():
        st = hloom.run("status", "--json", job)
        j = json.loads(st.stdout) if st.returncode == 0 and st.stdout.strip() else {}
        return [t["state"] for t in j.get("tasks", [])] == ["running"] * 2 and j
    st = hloom.wait_for(running, timeout=120, what="both tasks running, seen from the client")
    assert {t["host"] for t in st["tasks"]} <= {h.addrs["node1"], h.addrs["node2"]}, st
    # `loom logs --follow` from the client: the lines published so far, those
    # the tasks print when stopped (published after it started), and it ends
    # when the job does
    follow = hloom.popen("logs", "--follow", job)
    try:
        k = hloom.run("kill", job, timeout=60)
        assert k.returncode == 0, k.stdout + k.stderr
        assert "cancelling" not in k.stderr, k.stderr  # through the coordinator, not the RM
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            os.killpg(follow.pid, signal.SIGKILL)
    assert follow.returncode == 0, err
    assert "[worker:0] up" in out and "[worker:1] up" in out, out
    assert "[worker:0] stopping worker:0" in out and "[worker:1] stopping worker:1" in out, out
    app = final_app(hloom, h, "hostssubkill")
    assert app["state"] in ("FINISHED", "KILLED"), app
    st = hloom.run("status", job)
    assert "state    killed" in st.stdout, st.stdout


# ---- loom.run(fn, python="auto"): the caller's environment goes with the job

CALLER = r"""
import json, os, sys
import loom
import helpers       # a module beside this script: shipped in loom-py
import onlyhere      # installed only in this script's virtual environment


def where(k):
    import onlyhere, helpers
    return {"value": helpers.double(onlyhere.VALUE) + k, "python": sys.executable,
            "version": list(sys.version_info[:2]), "onlyhere": onlyhere.__file__,
            "helpers": helpers.__file__, "host": os.environ.get("NM_HOST"),
            "cwd": os.getcwd(), "loom": loom.__file__}


r = loom.run(where, args=(1,), num_workers=2, backend="yarn", bind=sys.argv[1], python="auto",
             timeout=240)
print(json.dumps({"values": r.values, "shipped": r.shipped,
                  "prefix": sys.prefix, "stderr": r.stderr}))
"""


def test_a_function_runs_with_the_callers_virtualenv_on_the_nodes(hloom, hadoop_hosts, tmp_path):
    """A function called from a virtual environment the nodes cannot see
    (the harness hides the client's /tmp), importing a package installed
    only there and a module beside the calling script: python="auto" packs
    the environment's site-packages and the caller's modules (loom and its
    libloom included) into archives cached on HDFS, and the tasks run the
    node's own python3.11 with them. The second job packs and uploads
    nothing: the DataNodes count no more than its pickle written."""
    h = hadoop_hosts
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = venv / "lib" / "python3.11" / "site-packages"
    shutil.copytree("/usr/lib/python3/dist-packages/cloudpickle", site / "cloudpickle")
    (site / "onlyhere").mkdir()
    (site / "onlyhere" / "__init__.py").write_text("VALUE = 20\n")
    # 2 MB that gzip cannot shrink: a second upload would show in the count
    (site / "onlyhere" / "weights.bin").write_bytes(os.urandom(2 << 20))
    app = tmp_path / "app"
    app.mkdir()
    (app / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (app / "caller.py").write_text(CALLER)
    seen = subprocess.run(h.on_node(1, "/usr/bin/python3", "-c", f"import os; print("
                                    f"os.path.exists('{site}'), os.path.exists('{ROOT / 'python' / 'loom'}'))"),
                          capture_output=True, text=True, timeout=60)
    # the nodes see neither (the checkout is an empty directory there)
    assert seen.stdout.split() == ["False", "False"], seen

    def call():
        e = dict(hloom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
                 LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
        r = subprocess.run([str(venv / "bin" / "python"), str(app / "caller.py"),
                            h.addrs["client"]], capture_output=True, text=True, env=e,
                           cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr

    out, err = call()
    if not all(s["packed"] for s in out["shipped"]):  # a cache of an earlier run: empty it
        for s in out["shipped"]:
            fs(hloom, "rm", s["url"])
        out, err = call()
    user = pwd.getpwuid(os.getuid()).pw_name
    cache = h.url(f"/user/{user}/.loom/cache/")
    assert sorted(s["what"] for s in out["shipped"]) == ["environment", "modules"], out
    for s in out["shipped"]:
        assert s["packed"] and s["uploaded"] == s["bytes"] > 0, s
        assert s["url"].startswith(cache) and s["sha256"] in s["url"], (s, cache)
        assert fs(hloom, "stat", s["url"]).returncode == 0
    assert "loom: the tasks' Python environment: " + cache in err, err
    assert out["prefix"] == str(venv)
    assert sorted(out["values"]) == ["worker:0", "worker:1"], out
    hosts = set()
    for t, v in out["values"].items():
        assert v["value"] == 41 and v["version"] == [3, 11], v
        # the node's python, the shipped site-packages and modules in the
        # container's directory (not the client's paths)
        assert v["python"] in ("/usr/bin/python3.11", "/bin/python3.11"), v
        assert v["onlyhere"] == f"{v['cwd']}/loom-env/onlyhere/__init__.py", v
        assert v["helpers"] == f"{v['cwd']}/loom-py/helpers.py", v
        assert v["loom"] == f"{v['cwd']}/loom-py/loom/__init__.py", v
        hosts.add(v["host"])
    assert hosts <= {h.addrs["node1"], h.addrs["node2"]}, hosts
    first = {s["what"]: s for s in out["shipped"]}
    try:
        before = settled_bytes(hloom, h, "pyenv0")
        out, err = call()
        after = settled_bytes(hloom, h, "pyenv1")
    finally:
        hloom.run("fs", "rm", "-r", h.url(f"/hosts-ship-{os.getpid()}"))
    assert sorted(out["values"]) == ["worker:0", "worker:1"], out
    for s in out["shipped"]:
        assert not s["packed"] and s["uploaded"] == 0, s
        assert s["url"] == first[s["what"]]["url"], (s, first)
    assert "(cached already" in err, err
    # settled_bytes' marker, the job's pickle, the aggregated logs: not the
    # archives (each more than 2 MB)
    assert min(s["bytes"] for s in first.values()) > 2 << 20, first
    assert after - before < 1 << 20, (after - before, first)
    print(f"\nshipped: environment {first['environment']['bytes']} B, modules "
          f"{first['modules']['bytes']} B, packed and uploaded in "
          f"{first['environment']['seconds']} + {first['modules']['seconds']} s; the second "
          f"job wrote {after - before} B to HDFS")
