"""loom against a real Apache Hadoop YARN (3.5.0 from Maven Central: a
ResourceManager and two NodeManagers as separate JVMs, and HDFS beside it,
started for this module by `scripts/yarn-cluster.sh start --hdfs` in a
directory of its own and stopped after it, no JVM of it left): the
script's HDFS stores a file on both DataNodes; `loom check --backend yarn` reports what the
ResourceManager's REST API says, specs YARN could never run are refused
with figures before anything is submitted, a spec that fits is told that
launching is not built yet, and a ResourceManager that cannot be reached,
or does not answer, is a backend error within seconds."""
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "yarn-cluster.sh"

pytestmark = pytest.mark.skipif(
    not (shutil.which("java") and shutil.which("mvn")),
    reason="java and mvn are not installed (scripts/setup.sh installs a JDK and Maven)")


def cluster_pids(d: Path):
    """Pids of the JVMs of the cluster in d (their -Dloom.yarn.dir=d)."""
    mark = f"-Dloom.yarn.dir={d}".encode()
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if mark in (p / "cmdline").read_bytes().split(b"\0"):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


class Yarn:
    def __init__(self, d: Path):
        self.dir = d
        self.conf = d / "conf"
        ports = dict(l.split() for l in (d / "ports").read_text().splitlines())
        self.rm_port = int(ports["rm"])
        self.nn_port = int(ports["namenode"])
        self.nn_web = f"http://127.0.0.1:{ports['namenode-web']}"
        self.web = f"http://127.0.0.1:{ports['web']}"
        self.nm_ports = [int(ports["nm1"]), int(ports["nm2"])]

    def rest(self, path):
        with urllib.request.urlopen(f"{self.web}/ws/v1/cluster/{path}", timeout=10) as r:
            return json.load(r)

    def apps(self):
        return (self.rest("apps").get("apps") or {}).get("app") or []


@pytest.fixture(scope="module")
def yarn(tmp_path_factory):
    d = tmp_path_factory.mktemp("yarn")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "start", "--hdfs", str(d)], capture_output=True,
                       text=True, timeout=400)
    took = time.monotonic() - t0
    try:
        assert r.returncode == 0, f"yarn-cluster.sh start failed:\n{r.stderr[-4000:]}"
        assert r.stdout.strip() == f"export HADOOP_CONF_DIR={d}/conf", r.stdout
        print(f"\nYARN and HDFS up in {took:.1f}s")
        yield Yarn(d)
    finally:
        s = subprocess.run(["bash", str(SCRIPT), "stop", str(d)], capture_output=True, text=True,
                           timeout=120)
        left = cluster_pids(d)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert s.returncode == 0, s.stderr
        assert not left, f"JVMs of the YARN cluster outlived `stop`: {left}"


@pytest.fixture
def yloom(loom, yarn):
    loom.env["HADOOP_CONF_DIR"] = str(yarn.conf)
    before = len(yarn.apps())
    yield loom
    # loom submitted nothing, whatever it said
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
    blocks = [p for i in (1, 2) for p in (yarn.dir / f"dn{i}" / "data").rglob("blk_*")
              if not p.name.endswith(".meta")]
    assert sorted(p.parent.parts[len(yarn.dir.parts)] for p in blocks) == ["dn1", "dn2"], blocks
    assert all(p.read_bytes() == data for p in blocks)


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
], ids=["unknown-label", "too-many-gpus", "too-much-memory", "label-node-too-small", "no-queue"])
def test_refused_with_figures(yloom, role, top, want):
    t0 = time.monotonic()
    r = yloom.run("run", spec(yloom, role, top), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert re.search(r"loom: .*job\.yaml: cannot run on backend yarn: " + want, r.stderr), r.stderr
    assert time.monotonic() - t0 < 10
    assert yloom.jobs() == []


def test_a_spec_that_fits_is_told_launching_is_not_built(yloom):
    r = yloom.run("run", spec(yloom, "label: gpu, gpus: 2, vcores: 2, memory: 3GiB"), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the spec fits backend yarn, but launching on YARN is not built yet" in r.stderr, r.stderr
    assert yloom.jobs() == []
    r = yloom.run("submit", spec(yloom, "memory: 1GiB"), timeout=60)
    assert r.returncode == 2 and "launching on YARN is not built yet" in r.stderr, r.stderr
    assert yloom.jobs() == []


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
    # NodeManagers may be LOST for a moment, which `loom check` reports, until they resync.
    seen = []

    def usable():
        r = yloom.run("check", "--backend", "yarn", timeout=60)
        seen.append(r.stdout)
        return r.returncode == 0
    yloom.wait_for(usable, timeout=60, what="`loom check --backend yarn` to pass again")
    for out in seen[:-1]:
        assert re.search(r"FAIL backend yarn: .*: \d of 2 nodes RUNNING", out), out
