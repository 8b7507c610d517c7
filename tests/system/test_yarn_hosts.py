"""YARN and HDFS on hosts that are really apart (conftest's hadoop_hosts:
clusters.py's HadoopHosts): the ResourceManager and the NameNode on one
network namespace, a NodeManager and a DataNode on each of two more, the
client (this process) on a fourth address of the same bridge. A
NodeManager, and so every container it starts, sees a stock node
(hidden.py): no checkout, no build, no Python environment of ours, none of
libuv, libyaml, jansson and protobuf-c, a /tmp of its own."""
import hashlib
import json
import os
import socket
import subprocess
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest

import hidden
from conftest import BUILD, LOOM, ROOT
from netns import ip

NODES = (1, 2)


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
import ctypes, json, os, socket, sys, zlib
a = json.loads(sys.argv[1])
out = {"hostname": socket.gethostname()}
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


@pytest.mark.parametrize("n", NODES)
def test_a_node_is_a_stock_node(hadoop_hosts, client_server, tmp_path, n):
    h = hadoop_hosts
    caddr, cport, token, peers = client_server
    other = 3 - n
    # the client's /tmp has a file of its own; the node writes one to its /tmp
    theirs = Path(f"/tmp/loom-client-{uuid.uuid4().hex}")
    theirs.write_text("the client's")
    mine = f"loom-node-{uuid.uuid4().hex}"
    dirs, files = hidden.lacks()
    assert ROOT in dirs, dirs
    probe = {
        "dirs": [str(ROOT), str(Path.home() / ".cache/loom/venvs")],
        "paths": [str(ROOT / "CMakeLists.txt"), str(LOOM), str(BUILD / "libloom.so"),
                  str(theirs), str(h.dir / f"nm{other}"), str(h.dir / f"dn{other}"),
                  str(h.dir / "conf"), str(h.dir / "logs"), str(tmp_path),
                  str(h.dir / f"nm{n}" / "local"), str(h.dir / f"dn{n}" / "data")],
        "libs": files, "mine": mine, "client": caddr, "port": cport,
    }
    try:
        r = subprocess.run(h.on_node(n, "/usr/bin/python3", "-c", NODE_PROBE, json.dumps(probe)),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout)
    finally:
        theirs.unlink()
    assert seen["hostname"] == f"loom-node{n}"
    # the checkout and the environments: empty
    assert seen["dirs"] == {str(ROOT): [], str(Path.home() / ".cache/loom/venvs"): []}, seen
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


def test_the_build_does_not_run_on_a_node(hadoop_hosts):
    """The client's loom, copied to a node's /tmp, cannot start there: the
    libraries it links are not on the node."""
    h = hadoop_hosts
    assert LOOM.exists(), f"build loom first: {LOOM} is missing"
    dst = h.dir / "host-node1" / "tmp" / "loom"
    dst.write_bytes(LOOM.read_bytes())
    dst.chmod(0o755)
    r = subprocess.run(h.on_node(1, "/tmp/loom", "--version"), capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 127, (r.returncode, r.stdout, r.stderr)
    assert "error while loading shared libraries" in r.stderr and "file too short" in r.stderr, \
        r.stderr
    # the same file runs on the client
    ok = subprocess.run([str(dst), "--version"], capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr


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
    h = HadoopHosts(d, tag=f"loomf{os.getpid()}", k=16 + (os.getpid() + 1) % 224)
    with pytest.raises(RuntimeError, match="yarn-cluster.sh start --hdfs --hosts failed"):
        h.start()
    assert h.tag not in ip("netns", "list") and h.tag not in ip("-o", "link")
    from clusters import jvm_pids
    assert jvm_pids(d) == []
