"""YARN and HDFS on hosts that are really apart (conftest's hadoop_hosts:
clusters.py's HadoopHosts): the ResourceManager and the NameNode on one
network namespace, a NodeManager and a DataNode on each of two more, the
client (this process) on a fourth address of the same bridge. A
NodeManager, and so every container it starts, sees a stock node
(hidden.py): no checkout, no build, no Python environment of ours, none of
libuv, libyaml, jansson and protobuf-c, a /tmp of its own."""
import base64
import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

import hidden
from conftest import BUILD, LOOM, ROOT
from netns import ip

NODES = (1, 2)


def running(pid):
    """Whether pid is a process, not a zombie its parent has yet to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def netns_of(pid):
    return ip("netns", "identify", str(pid)).strip()


def test_the_cluster_is_on_three_hosts(hadoop_hosts):
    h = hadoop_hosts
    # every daemon in its own host's network namespace, with its host name
    for daemon, role in (("rm", "head"), ("nn", "head"), ("nm1", "node1"), ("dn1", "node1"),
                         ("nm2", "node2"), ("dn2", "node2")):
        pid = h.pid(daemon)
        assert netns_of(pid) == h.ns[role], daemon
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"), daemon
        uts = subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True,
                             text=True, timeout=10)
        assert uts.stdout.strip() == f"loom-{role}", (daemon, uts)
    # 2 NodeManagers RUNNING, each at its own host's address
    nodes = h.rest("nodes")["nodes"]["node"]
    assert sorted(n["state"] for n in nodes) == ["RUNNING", "RUNNING"], nodes
    ports = h.ports()
    assert sorted(n["id"] for n in nodes) == sorted(
        f"{h.addrs[f'node{i}']}:{ports[f'nm{i}']}" for i in NODES), nodes
    assert sorted(n["nodeHTTPAddress"].split(":")[0] for n in nodes) == \
        sorted(h.addrs[f"node{i}"] for i in NODES)
    gpu = [n for n in nodes if "gpu" in (n.get("nodeLabels") or [])]
    assert [n["id"].split(":")[0] for n in gpu] == [h.addrs["node1"]]
    # 2 live DataNodes, each at its own host's address
    with urllib.request.urlopen(f"{h.nn_web}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo",
                                timeout=10) as r:
        bean = json.load(r)["beans"][0]
    live = json.loads(bean["LiveNodes"])
    assert sorted(v["xferaddr"] for v in live.values()) == sorted(
        f"{h.addrs[f'node{i}']}:{ports[f'dn{i}']}" for i in NODES), live
    assert not bean["Safemode"]
    rss = h.rss_mib()
    assert sorted(rss) == ["dn1", "dn2", "nm1", "nm2", "nn", "rm"], rss
    print(f"\ncluster on 3 hosts: up in {h.start_s:.1f}s; RSS of its JVMs "
          f"{sum(rss.values()):.0f} MiB (" +
          ", ".join(f"{k} {v:.0f}" for k, v in sorted(rss.items())) + ")")


@pytest.fixture
def client_server(hadoop_hosts):
    """A TCP server on the client's address that sends a token to whoever
    connects: (address, port, token, [peers that connected])."""
    token = uuid.uuid4().hex
    s = socket.socket()
    s.bind((hadoop_hosts.addrs["client"], 0))
    s.listen(8)
    s.settimeout(0.2)
    peers, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, a = s.accept()
            except (socket.timeout, OSError):
                continue
            peers.append(a[0])
            with c:
                c.sendall(token.encode())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield hadoop_hosts.addrs["client"], s.getsockname()[1], token, peers
    stop.set()
    t.join(5)
    s.close()


# What the test runs on a node, with the node's own /usr/bin/python3: one
# JSON object of what it saw.
NODE_PROBE = r"""
import base64, ctypes, json, os, socket, sys, zlib
# its arguments: argv[1], or (in a YARN container) PROBE_ARGS in base64
a = json.loads(sys.argv[1] if len(sys.argv) > 1 else base64.b64decode(os.environ["PROBE_ARGS"]))
out = {"hostname": socket.gethostname(), "cwd": os.getcwd(),
       "container": os.environ.get("CONTAINER_ID"), "nm_host": os.environ.get("NM_HOST")}
def entries(p):
    try:
        return sorted(os.listdir(p))
    except OSError as e:
        return "error: " + e.strerror
out["dirs"] = {p: entries(p) for p in a["dirs"]}
out["exists"] = {p: os.path.exists(p) for p in a["paths"]}
out["libs"] = {}
for f in a["libs"]:
    try:
        ctypes.CDLL(f)
        out["libs"][f] = "loaded"
    except OSError as e:
        out["libs"][f] = str(e)
out["libc"] = ctypes.CDLL("libc.so.6").getpid() == os.getpid()
out["zlib"] = zlib.decompress(zlib.compress(b"node")) == b"node"
out["tmp"] = sorted(os.listdir("/tmp"))
with open("/tmp/" + a["mine"], "w") as f:
    f.write("written on the node")
c = socket.create_connection((a["client"], a["port"]), timeout=10)
out["token"] = c.recv(100).decode()
c.close()
print(json.dumps(out))
"""


def probe_args(h, client_server, tmp_path, theirs, mine):
    """What NODE_PROBE looks at on a node (either), theirs a file in the
    client's /tmp, mine the name of the file the node writes in its own."""
    caddr, cport, _, _ = client_server
    dirs, files = hidden.lacks()
    assert ROOT in dirs, dirs
    paths = [ROOT / "CMakeLists.txt", LOOM, BUILD / "libloom.so", theirs, h.dir / "conf",
             h.dir / "logs", tmp_path]
    for i in NODES:
        paths += [h.dir / f"nm{i}", h.dir / f"dn{i}", h.dir / f"nm{i}" / "local",
                  h.dir / f"dn{i}" / "data"]
    return {"dirs": [str(ROOT), str(Path.home() / ".cache/loom/venvs")],
            "paths": [str(p) for p in paths], "libs": files, "mine": mine, "client": caddr,
            "port": cport}


def check_stock_node(h, n, seen, theirs, mine, client_server, tmp_path):
    """What NODE_PROBE saw on node n is a stock node's view."""
    _, _, token, peers = client_server
    other = 3 - n
    assert seen["hostname"] == f"loom-node{n}"
    # the checkout and the environments: empty (a checkout under /tmp, as a
    # CI clone may be, is not there at all: the node has a /tmp of its own)
    hidden = [] if not str(ROOT).startswith("/tmp/") else "error: No such file or directory"
    assert seen["dirs"] == {str(ROOT): hidden, str(Path.home() / ".cache/loom/venvs"): []}, seen
    ex = seen["exists"]
    for p in (ROOT / "CMakeLists.txt", LOOM, BUILD / "libloom.so", theirs,
              h.dir / f"nm{other}", h.dir / f"dn{other}", h.dir / "conf", h.dir / "logs",
              tmp_path):
        assert ex[str(p)] is False, (p, seen)
    # its own daemons' directories it has
    assert ex[str(h.dir / f"nm{n}" / "local")] and ex[str(h.dir / f"dn{n}" / "data")], seen
    # the four libraries: every shared object of theirs fails to load
    for f, what in seen["libs"].items():
        assert "file too short" in what, (f, what)
    assert {Path(f).name.split(".so")[0] for f in seen["libs"]} >= \
        {"libuv", "libyaml-0", "libjansson", "libprotobuf-c"}, seen["libs"]
    # what any node has
    assert seen["libc"] and seen["zlib"]
    # /tmp: the node's own; what it wrote is on its host, not the client's
    assert theirs.name not in seen["tmp"]
    assert not Path("/tmp", mine).exists()
    assert (h.dir / f"host-node{n}" / "tmp" / mine).read_text() == "written on the node"
    # the client reached over the bridge, from the node's address
    assert seen["token"] == token
    assert peers == [h.addrs[f"node{n}"]], peers


@pytest.mark.parametrize("n", NODES)
def test_a_node_is_a_stock_node(hadoop_hosts, client_server, tmp_path, n):
    """From inside NodeManager nmN's namespaces (nsenter)."""
    h = hadoop_hosts
    mine = f"loom-node-{uuid.uuid4().hex}"
    theirs = Path(f"/tmp/loom-client-{uuid.uuid4().hex}")
    theirs.write_text("the client's")
    probe = probe_args(h, client_server, tmp_path, theirs, mine)
    try:
        r = subprocess.run(h.on_node(n, "/usr/bin/python3", "-c", NODE_PROBE, json.dumps(probe)),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout)
    finally:
        theirs.unlink()
    check_stock_node(h, n, seen, theirs, mine, client_server, tmp_path)


def loom_fs(h, *args):
    env = dict(os.environ, HADOOP_CONF_DIR=str(h.conf))
    env.pop("HADOOP_USER_NAME", None)
    return subprocess.run([str(LOOM), "fs", *map(str, args)], env=env, capture_output=True,
                          timeout=60)


def rm_post(h, path, body=None):
    req = urllib.request.Request(f"{h.web}/ws/v1/cluster/{path}", method="POST",
                                 data=json.dumps(body).encode() if body is not None else b"",
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        text = r.read()
        return json.loads(text) if text.strip() else None


def test_a_yarn_container_sees_a_stock_node(hadoop_hosts, client_server, tmp_path):
    """A real YARN container: an application submitted through the RM's
    REST API whose AM container runs the node's own /usr/bin/python3 on
    probe.py, which YARN localized from HDFS. What it sees is a stock
    node's view (as from nsenter), from the container's own directory on
    that node's disk."""
    h = hadoop_hosts
    mine = f"loom-container-{uuid.uuid4().hex}"
    probe_py = tmp_path / "probe.py"
    probe_py.write_text(NODE_PROBE)
    d = f"/hosts-probe-{uuid.uuid4().hex}"
    assert loom_fs(h, "mkdir", h.url(d)).returncode == 0
    r = loom_fs(h, "put", probe_py, h.url(f"{d}/probe.py"))
    assert r.returncode == 0, r.stderr
    st = json.loads(loom_fs(h, "stat", h.url(f"{d}/probe.py")).stdout)
    app = rm_post(h, "apps/new-application")["application-id"]
    theirs = Path(f"/tmp/loom-client-{uuid.uuid4().hex}")
    theirs.write_text("the client's")
    try:
        args = probe_args(h, client_server, tmp_path, theirs, mine)
        spec = {
            "application-id": app, "application-name": "loom-hosts-probe",
            "application-type": "YARN", "queue": "default", "max-app-attempts": 1,
            "resource": {"memory": 128, "vCores": 1},
            "am-container-spec": {
                "local-resources": {"entry": [{"key": "probe.py", "value": {
                    "resource": h.url(f"{d}/probe.py"), "type": "FILE",
                    "visibility": "APPLICATION", "size": st["length"],
                    "timestamp": st["modification_ms"]}}]},
                "environment": {"entry": [{"key": "PROBE_ARGS", "value": base64.b64encode(
                    json.dumps(args).encode()).decode()}]},
                "commands": {"command": "/usr/bin/python3 probe.py 1><LOG_DIR>/stdout "
                                        "2><LOG_DIR>/stderr"},
            },
        }
        rm_post(h, "apps", spec)
        end = time.time() + 90
        while time.time() < end:
            info = h.rest(f"apps/{app}")["app"]
            if info["state"] in ("FINISHED", "FAILED", "KILLED"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"application {app} did not end in 90 s: {info}")
        outs = [p for n in NODES for p in (h.dir / f"nm{n}" / "logs" / app).glob("*/stdout")]
        assert len(outs) == 1, (outs, info)
        n = int(outs[0].parts[-5][-1])  # DIR/nmN/logs/APP/CONTAINER/stdout
        text = outs[0].read_text()
        assert text, (outs[0].with_name("stderr").read_text(), info)
        seen = json.loads(text)
    finally:
        theirs.unlink()
        loom_fs(h, "rm", "-r", h.url(d))
    # it ran in a container of node n, in that container's own directory
    assert seen["container"] == outs[0].parent.name and seen["nm_host"] == h.addrs[f"node{n}"]
    assert seen["cwd"].startswith(f"{h.dir}/nm{n}/local/usercache/"), seen["cwd"]
    assert seen["cwd"].endswith(f"/{app}/{seen['container']}"), seen["cwd"]
    check_stock_node(h, n, seen, theirs, mine, client_server, tmp_path)


LINKS_ALL_FOUR = r"""
#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <uv.h>
#include <yaml.h>
int main(void) {
  printf("%s %s %s %s\n", uv_version_string(), yaml_get_version_string(), jansson_version_str(),
         protobuf_c_version());
  return 0;
}
"""


def test_a_program_linking_the_four_libraries_does_not_run_on_a_node(hadoop_hosts, tmp_path):
    """The control: a program linked against the shared libuv, libyaml,
    jansson and protobuf-c runs on the client, and on a node fails to load
    (what a build of loom that needs them met there)."""
    h = hadoop_hosts
    src = tmp_path / "four.c"
    src.write_text(LINKS_ALL_FOUR)
    exe = h.dir / "host-node1" / "tmp" / f"four-{uuid.uuid4().hex}"
    cc = subprocess.run(["gcc", "-o", str(exe), str(src), "-Wl,--no-as-needed", "-luv", "-lyaml",
                         "-ljansson", "-lprotobuf-c"], capture_output=True, text=True, timeout=60)
    assert cc.returncode == 0, cc.stderr
    ok = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and len(ok.stdout.split()) == 4, (ok.stdout, ok.stderr)
    r = subprocess.run(h.on_node(1, f"/tmp/{exe.name}"), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 127, (r.returncode, r.stdout, r.stderr)
    assert "error while loading shared libraries" in r.stderr and "file too short" in r.stderr, \
        r.stderr
    exe.unlink()


def test_hdfs_from_the_client(hadoop_hosts, tmp_path):
    """`loom fs` of the build, on the client, against the cluster's
    NameNode: blocks go to the DataNodes at their hosts' addresses, one
    replica on each host's own disk."""
    h = hadoop_hosts
    env = dict(os.environ, HADOOP_CONF_DIR=str(h.conf))
    env.pop("HADOOP_USER_NAME", None)
    data = os.urandom(3 * 1024 * 1024 + 17)
    src = tmp_path / "in"
    src.write_bytes(data)
    url = h.url(f"/hosts-{uuid.uuid4().hex}/f")

    def fs(*args):
        return subprocess.run([str(LOOM), "fs", *map(str, args)], env=env, capture_output=True,
                              timeout=60)

    r = fs("mkdir", url.rsplit("/", 1)[0])
    assert r.returncode == 0, r.stderr
    r = fs("put", src, url)
    assert r.returncode == 0, r.stderr
    r = fs("cat", url)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(r.stdout).hexdigest() == hashlib.sha256(data).hexdigest()
    # hdfs:/// is this cluster's too (fs.defaultFS in HADOOP_CONF_DIR)
    r = fs("cat", "hdfs:///" + url.split("/", 3)[3])
    assert r.returncode == 0 and r.stdout == data, r.stderr
    st = json.loads(fs("stat", url).stdout)
    assert st["length"] == len(data), st
    # a replica of the file's one block on each host's own disk
    for i in NODES:
        blocks = [p for p in (h.dir / f"dn{i}" / "data").rglob("blk_*")
                  if not p.name.endswith(".meta") and p.stat().st_size == len(data)]
        assert [p.read_bytes() == data for p in blocks] == [True], (i, blocks)
    r = fs("rm", "-r", url.rsplit("/", 1)[0])
    assert r.returncode == 0, r.stderr


def test_a_failed_start_leaves_nothing(tmp_path_factory, monkeypatch):
    """A cluster whose daemons cannot start (no Hadoop jars on the
    classpath): start() fails naming the script's words, and stops
    everything: no namespace, link or JVM of it is left."""
    from clusters import HadoopHosts, hadoop_available
    from netns import available
    if not hadoop_available() or available():
        pytest.skip(available() or "needs java and mvn (scripts/setup.sh) for Hadoop")
    cp = tmp_path_factory.mktemp("nocp") / "cp"
    cp.write_text("/nonexistent/hadoop.jar\n")
    monkeypatch.setenv("LOOM_YARN_CLASSPATH", str(cp))
    d = tmp_path_factory.mktemp("hadoop-hosts-bad")
    h = HadoopHosts(d, tag=f"loomf{os.getpid()}")
    with pytest.raises(RuntimeError, match="yarn-cluster.sh start --hdfs --hosts failed"):
        h.start()
    assert h.tag not in ip("netns", "list") and h.tag not in ip("-o", "link")
    from clusters import jvm_pids
    assert jvm_pids(d) == []


def test_a_nodemanager_killed_and_started_again_is_on_its_host(hadoop_hosts):
    """yarn-cluster.sh nodemanager start N on this cluster (DIR/hosts): the
    NodeManager comes back in its host's namespaces, at its address, with
    the stock node's view; status names the hosts' addresses."""
    h = hadoop_hosts
    old = h.pid("nm2")
    os.kill(old, 9)
    h.script("nodemanager", "start", 2, timeout=200)
    new = h.pid("nm2")
    assert new != old and not running(old)
    assert netns_of(new) == h.ns["node2"]
    r = subprocess.run(h.on_node(2, "sh", "-c", f"hostname; ls -A {ROOT} | wc -l; ls -A /tmp"),
                       capture_output=True, text=True, timeout=30)
    host, n_root, *tmp = r.stdout.split()
    assert (host, n_root) == ("loom-node2", "0"), r
    assert sorted(tmp) == sorted(os.listdir(h.dir / "host-node2" / "tmp")), tmp
    st = h.script("status").stdout
    assert f"NameNode hdfs://{h.addrs['head']}:{h.ports()['namenode']}" in st, st
    up = [l for l in st.splitlines() if l.startswith("node ") and " RUNNING " in l]
    assert sorted(l.split()[1] for l in up) == sorted(
        f"{h.addrs[f'node{i}']}:{h.ports()[f'nm{i}']}" for i in NODES), st
