"""loom's HDFS client (`loom fs`, C, no JVM) against a real Apache HDFS
(3.5.0 from Maven Central: a NameNode and two DataNodes, replication 2,
each its own JVM: the test run's one Hadoop cluster, conftest's `hdfs`,
started once and shared with the other modules that need it). Hadoop's own Java client (FsShell, on the script's classpath)
is the reference: what loom writes, Java reads byte for byte, and the other
way round; what loom lists and stats is what Java says. Then what goes
wrong: a missing path, a permission denied, a NameNode that is not there,
a DataNode stopped in the middle of a read, a replica corrupted on disk
(one: loom reads the other; both: an error naming the path and the block,
and no byte that failed its checksum on stdout), and hdfs:/// with and
without HADOOP_CONF_DIR.

The contract: loom fs ls|stat|cat|get|put [-f]|mkdir|rm [-r]|mv; exit 0
ok, 1 a filesystem error, 2 usage or a bad URL, 3 the cluster cannot be
reached; errors on stderr, naming the path (and the block, for a data
error)."""
import hashlib
import json
import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from clusters import hadoop_available
from conftest import LOOM, SAN_REPORT

ME = pwd.getpwuid(os.getuid()).pw_name  # the NameNode runs as this user: its superuser

pytestmark = pytest.mark.skipif(
    not hadoop_available(),
    reason="java and mvn are not installed (scripts/setup.sh installs a JDK and Maven)")

KiB, MiB = 1024, 1024 * 1024


def sha(b: bytes):
    return hashlib.sha256(b).hexdigest()


def blob(n: int, seed):
    return random.Random(f"{seed}-{n}").randbytes(n)


class Fs:
    """`loom fs` as a user runs it: bytes out, stderr as text; sanitizer
    reports in stderr go where the loom fixture fails the test for them."""

    def __init__(self, loom, hdfs):
        self.loom = loom
        self.hdfs = hdfs
        self.env = dict(loom.env)
        for k in ("HADOOP_CONF_DIR", "HADOOP_USER_NAME"):
            self.env.pop(k, None)

    def _env(self, user, conf, env):
        e = dict(self.env, **(env or {}))
        if user:
            e["HADOOP_USER_NAME"] = user
        if conf:
            e["HADOOP_CONF_DIR"] = str(conf)
        return e

    def __call__(self, *args, user=None, conf=None, env=None, timeout=120):
        r = subprocess.run([str(LOOM), "fs", *map(str, args)], env=self._env(user, conf, env),
                           capture_output=True, timeout=timeout)
        r.err = r.stderr.decode(errors="replace")
        m = SAN_REPORT.search(r.err)
        if m:
            self.loom.san_reports.append((f"stderr of loom fs {' '.join(map(str, args))}",
                                          r.err[m.start():][:2000]))
        return r

    def popen(self, *args, user=None, conf=None, env=None):
        return subprocess.Popen([str(LOOM), "fs", *map(str, args)],
                                env=self._env(user, conf, env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)

    def ok(self, *args, **kw):
        r = self(*args, **kw)
        assert r.returncode == 0, (args, r.returncode, r.err)
        return r


@pytest.fixture
def fs(loom, hdfs):
    return Fs(loom, hdfs)


def said(r):
    return f"exit {r.returncode}, stderr: {r.err!r}, stdout: {r.stdout[:300]!r}"


# 0, one byte, a chunk (512) and around it, a packet's worth (64 KiB) and
# around it, and more than one block (the Java writes use 1 MiB blocks).
SIZES = [0, 1, 511, 512, 513, 64 * KiB - 1, 64 * KiB, 64 * KiB + 1]
MULTI = [2 * MiB, 2 * MiB + 3 * KiB + 7]  # two whole blocks; two and a bit
JAVA_BLOCK = 1 * MiB


def test_what_loom_puts_java_reads(fs, hdfs, tmp_path):
    files = {}
    for n in SIZES + MULTI:
        p = tmp_path / f"f{n}"
        p.write_bytes(blob(n, "loom-put"))
        files[n] = p
    # the cluster's configuration (its dfs.replication is 2), with 1 MiB blocks
    conf = tmp_path / "conf"
    shutil.copytree(hdfs.conf, conf)
    site = (conf / "hdfs-site.xml").read_text()
    (conf / "hdfs-site.xml").write_text(site.replace(
        "</configuration>",
        f"  <property><name>dfs.blocksize</name><value>{JAVA_BLOCK}</value></property>\n"
        "</configuration>"))
    fs.ok("mkdir", hdfs.url("/rt-loom"))
    for n, p in files.items():
        r = fs.ok("put", p, hdfs.url(f"/rt-loom/f{n}"), conf=conf)
        assert r.stdout == b"", said(r)
    # Java's -cat of all of them, in order: each one's bytes where they belong
    order = sorted(files)
    out = hdfs.java("-cat", *(f"/rt-loom/f{n}" for n in order)).stdout
    at = 0
    for n in order:
        got = out[at:at + n]
        assert sha(got) == sha(files[n].read_bytes()), f"f{n}: Java read other bytes than loom put"
        at += n
    assert at == len(out), (at, len(out))
    # and Java's listing has each with its size, replication 2, owned by the user
    listing = ls_java(hdfs, "/rt-loom")
    assert {e["name"]: e["size"] for e in listing.values()} == {f"f{n}": n for n in order}
    assert all(e["repl"] == "2" and e["owner"] == ME for e in listing.values()), listing
    # in blocks of the size asked for: the multi-block ones are that
    stat = hdfs.java_text("-stat", "%n %o %b", *(f"/rt-loom/f{n}" for n in MULTI)).split("\n")
    assert stat[:2] == [f"f{n} {JAVA_BLOCK} {n}" for n in MULTI], stat


def test_what_java_puts_loom_reads(fs, hdfs, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    want = {}
    for n in SIZES + MULTI:
        (src / f"f{n}").write_bytes(blob(n, "java-put"))
        want[n] = (src / f"f{n}").read_bytes()
    hdfs.java("-mkdir", "/rt-java")
    hdfs.java("-D", f"dfs.blocksize={JAVA_BLOCK}", "-put", *sorted(src.iterdir()), "/rt-java/")
    # the multi-block files are that: Java says their block size
    stat = hdfs.java_text("-stat", "%n %o %b", *(f"/rt-java/f{n}" for n in MULTI)).split("\n")
    assert stat[:2] == [f"f{n} {JAVA_BLOCK} {n}" for n in MULTI], stat
    for n, data in want.items():
        r = fs.ok("cat", hdfs.url(f"/rt-java/f{n}"))
        assert sha(r.stdout) == sha(data), f"loom fs cat f{n}: {len(r.stdout)} bytes, not the {n} Java put"
        local = tmp_path / f"got{n}"
        r = fs.ok("get", hdfs.url(f"/rt-java/f{n}"), local)
        assert local.exists() and sha(local.read_bytes()) == sha(data), f"loom fs get f{n}"
    # several URLs: their bytes one after the other
    names = [SIZES[3], MULTI[1], SIZES[1]]
    r = fs.ok("cat", *(hdfs.url(f"/rt-java/f{n}") for n in names))
    assert sha(r.stdout) == sha(b"".join(want[n] for n in names))


def test_hdfs_triple_slash_is_the_configured_namenode(fs, hdfs, tmp_path):
    data = blob(5000, "default-fs")
    (tmp_path / "d").write_bytes(data)
    hdfs.java("-put", tmp_path / "d", "/default-fs")
    r = fs.ok("cat", "hdfs:///default-fs", conf=hdfs.conf)
    assert r.stdout == data
    # put and stat by hdfs:/// too; Java agrees
    fs.ok("put", tmp_path / "d", "hdfs:///default-fs-2", conf=hdfs.conf)
    assert hdfs.java("-cat", "/default-fs-2").stdout == data
    # without HADOOP_CONF_DIR: nothing to resolve it with, a usage error that says so
    for args in (("cat", "hdfs:///default-fs"), ("ls", "hdfs:///")):
        r = fs(*args)
        assert r.returncode == 2, said(r)
        assert "HADOOP_CONF_DIR" in r.err and r.stdout == b"", said(r)
    # a configuration directory without a core-site.xml: named
    empty = tmp_path / "conf-empty"
    empty.mkdir()
    r = fs("cat", "hdfs:///default-fs", conf=empty)
    assert r.returncode == 2, said(r)
    assert str(empty) in r.err and "core-site.xml" in r.err, said(r)


@pytest.mark.parametrize("args", [
    (), ("frob", "hdfs:///x"), ("cat",), ("put", "only-one"), ("mv", "hdfs://127.0.0.1:1/a"),
    ("ls", "hdfs://127.0.0.1:99999/x"), ("ls", "hdfs://127.0.0.1:port/x"),
    ("ls", "hdfs://127.0.0.1:1:2/x"),
], ids=["no-verb", "unknown-verb", "cat-nothing", "put-one-arg", "mv-one-arg", "port-too-big",
        "port-not-a-number", "two-ports"])
def test_usage_and_bad_urls_exit_2(fs, hdfs, args):
    t0 = time.monotonic()
    r = fs(*args, timeout=30)
    assert r.returncode == 2, said(r)
    assert r.err.strip() and r.stdout == b"", said(r)
    if args[1:] and args[-1].startswith("hdfs://127.0.0.1:") and args[0] == "ls":
        assert args[-1] in r.err, said(r)  # the bad URL is named
    assert time.monotonic() - t0 < 10


def ls_java(hdfs, path, user=None, env=None):
    """FsShell -ls, by path: perm, repl, owner, group, size, date, name."""
    out = {}
    for l in hdfs.java_text("-ls", path, user=user, env=env).splitlines():
        m = re.fullmatch(r"([-d][-rwxst]{9}\+?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+"
                         r"(\d{4}-\d\d-\d\d \d\d:\d\d)\s+(.*)", l)
        if m:
            out[m[7]] = dict(perm=m[1], repl=m[2], owner=m[3], group=m[4], size=int(m[5]),
                             date=m[6], name=m[7].rsplit("/", 1)[-1])
    return out


def tokens(line):
    return set(re.split(r"[\s,;=()\[\]]+", line)) - {""}


def symbolic(octal, kind):
    """"640", "regular file" -> "-rw-r-----"."""
    bits = int(octal, 8)
    s = "".join(c if bits & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return ("d" if kind == "directory" else "-") + s


@pytest.fixture(scope="module")
def meta(hdfs, tmp_path_factory):
    """/meta: a file of 1234 bytes (750), an empty one with replication 1,
    a directory (750) with one inside."""
    tmp_path = tmp_path_factory.mktemp("meta")
    (tmp_path / "a").write_bytes(blob(1234, "meta"))
    (tmp_path / "b").write_bytes(b"")
    hdfs.java("-mkdir", "-p", "/meta/sub/deeper")
    hdfs.java("-put", tmp_path / "a", tmp_path / "b", "/meta/")
    hdfs.java("-chmod", "750", "/meta/a", "/meta/sub")
    hdfs.java("-setrep", "1", "/meta/b")
    return "/meta"


def test_ls_says_what_java_says(fs, hdfs, meta):
    """Each entry's line: permissions, replication ("-" for a directory),
    owner, group, size and name as FsShell -ls has them."""
    java = ls_java(hdfs, "/meta")
    assert sorted(java) == ["/meta/a", "/meta/b", "/meta/sub"], java
    r = fs.ok("ls", hdfs.url("/meta"))
    lines = r.stdout.decode().splitlines()
    assert len([l for l in lines if l.strip()]) in (3, 4), lines  # three entries, a header at most
    for path, e in java.items():
        mine = [l for l in lines if re.search(rf"(^|[\s/]){re.escape(e['name'])}/?$", l)]
        assert len(mine) == 1, (e["name"], lines)
        m = re.fullmatch(r"(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d{4}-\d\d-\d\d \d\d:\d\d)\s+(\S+)",
                         mine[0])
        assert m, f"loom fs ls: {mine[0]!r}; FsShell -ls: {e}"
        assert (m[1], m[2], m[3], m[4], int(m[5])) == \
            (e["perm"], e["repl"], e["owner"], e["group"], e["size"]), \
            f"loom fs ls: {mine[0]!r}; FsShell -ls: {e}"
        assert m[7] in (path, hdfs.url(path), e["name"]), mine[0]
    # ls of a file: that file's line
    r = fs.ok("ls", hdfs.url("/meta/a"))
    assert r.stdout.decode().strip().endswith("/meta/a"), r.stdout
    assert tokens(r.stdout.decode()) >= {"-rwxr-x---", "2", "1234"}, r.stdout


def test_ls_dates_are_local_time_as_java_prints_them(fs, hdfs, meta):
    """FsShell -ls prints modification times in the local time zone (TZ);
    so does `hdfs dfs -ls`, which loom fs ls is like."""
    tz = {"TZ": "Asia/Kolkata"}  # +05:30: no hour of it is UTC's
    java = {e["name"]: e["date"] for e in ls_java(hdfs, "/meta", env=tz).values()}
    r = fs.ok("ls", hdfs.url("/meta"), env=tz)
    mine = {l.rsplit("/", 1)[-1]: re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", l)[0]
            for l in r.stdout.decode().splitlines() if re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", l)}
    assert mine == java, f"loom fs ls: {mine}; FsShell -ls (TZ={tz['TZ']}): {java}"


def test_stat_says_what_java_says(fs, hdfs, meta):
    """loom fs stat: one line of JSON, each field as FsShell -stat has it."""
    paths = ("/meta/a", "/meta/b", "/meta/sub")
    java = hdfs.java_text("-stat", "%F|%u|%g|%b|%r|%o|%a|%Y", *paths).splitlines()
    assert len(java) == len(paths), java
    for path, line in zip(paths, java):
        f, u, g, b, rep, o, a, y = line.split("|")
        r = fs.ok("stat", hdfs.url(path))
        lines = r.stdout.decode().splitlines()
        assert len(lines) == 1, lines
        got = json.loads(lines[0])
        want = {"url": hdfs.url(path), "type": "directory" if f == "directory" else "file",
                "length": int(b), "permission": symbolic(a, f), "owner": u, "group": g,
                "modification_ms": int(y), "replication": int(rep), "blocksize": int(o)}
        assert got == want, (path, got, want)


def ls_r_java(hdfs, path):
    """FsShell -ls -R: {path: (type, owner, size)}."""
    out = {}
    for l in hdfs.java_text("-ls", "-R", path).splitlines():
        m = re.fullmatch(r"([-d])\S+\s+\S+\s+(\S+)\s+\S+\s+(\d+)\s+\S+ \S+\s+(.*)", l)
        if m:
            out[m[4]] = (m[1], m[2], int(m[3]))
    return out


def test_mkdir_put_mv_rm_as_java_sees_them(fs, hdfs, tmp_path):
    """loom's own reads check the steps; Java checks where they led."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(blob(3000, "one"))
    two.write_bytes(blob(2000, "two"))
    fs.ok("mkdir", hdfs.url("/ops"))
    fs.ok("mkdir", hdfs.url("/ops/d"))
    fs.ok("mkdir", hdfs.url("/ops/p/q/r"))  # with its parents
    fs.ok("put", one, hdfs.url("/ops/f"))
    # a file where a directory is asked for
    r = fs("mkdir", hdfs.url("/ops/f"))
    assert r.returncode == 1 and "/ops/f" in r.err, said(r)
    # put onto an existing file: refused without -f, the file as it was
    r = fs("put", two, hdfs.url("/ops/f"))
    assert r.returncode == 1 and "/ops/f" in r.err and re.search(r"exists", r.err), said(r)
    assert fs.ok("cat", hdfs.url("/ops/f")).stdout == one.read_bytes()
    fs.ok("put", "-f", two, hdfs.url("/ops/f"))
    assert fs.ok("cat", hdfs.url("/ops/f")).stdout == two.read_bytes()
    # mv: renamed, the old name gone
    fs.ok("mv", hdfs.url("/ops/f"), hdfs.url("/ops/g"))
    r = fs("cat", hdfs.url("/ops/f"))
    assert r.returncode == 1 and "/ops/f" in r.err, said(r)
    # mv onto an existing file, or of nothing: errors, nothing changed
    fs.ok("put", one, hdfs.url("/ops/h"))
    r = fs("mv", hdfs.url("/ops/g"), hdfs.url("/ops/h"))
    assert r.returncode == 1 and ("/ops/g" in r.err or "/ops/h" in r.err), said(r)
    r = fs("mv", hdfs.url("/ops/nothing"), hdfs.url("/ops/else"))
    assert r.returncode == 1 and "/ops/nothing" in r.err, said(r)
    fs.ok("put", one, hdfs.url("/ops/d/inner"))
    r = fs("rm", hdfs.url("/ops/d"))  # not empty, no -r
    assert r.returncode == 1 and "/ops/d" in r.err, said(r)
    assert ls_r_java(hdfs, "/ops") == {
        "/ops/d": ("d", ME, 0), "/ops/d/inner": ("-", ME, 3000), "/ops/g": ("-", ME, 2000),
        "/ops/h": ("-", ME, 3000), "/ops/p": ("d", ME, 0), "/ops/p/q": ("d", ME, 0),
        "/ops/p/q/r": ("d", ME, 0)}
    assert hdfs.java("-cat", "/ops/g", "/ops/h").stdout == two.read_bytes() + one.read_bytes()
    # rm: a file; a directory and all in it with -r; what is not there
    fs.ok("rm", hdfs.url("/ops/h"))
    fs.ok("rm", "-r", hdfs.url("/ops/d"))
    fs.ok("rm", "-r", hdfs.url("/ops/p"))
    r = fs("rm", hdfs.url("/ops/h"))
    assert r.returncode == 1 and "/ops/h" in r.err, said(r)
    assert ls_r_java(hdfs, "/ops") == {"/ops/g": ("-", ME, 2000)}
    # what loom lists is what is left
    lines = fs.ok("ls", hdfs.url("/ops")).stdout.decode().splitlines()
    assert [l.rsplit("/", 1)[-1] for l in lines if re.search(r"\d\d:\d\d ", l)] == ["g"], lines


@pytest.mark.parametrize("verb", ["cat", "ls", "stat", "get", "rm"])
def test_a_missing_path_is_exit_1_naming_it(fs, hdfs, tmp_path, verb):
    path = f"/missing-{verb}/nothing.bin"
    args = [verb, hdfs.url(path)] + ([tmp_path / "local"] if verb == "get" else [])
    r = fs(*args)
    assert r.returncode == 1, said(r)
    assert path in r.err and r.stdout == b"", said(r)
    assert re.search(r"[Nn]o such file|not found|does not exist", r.err), said(r)


def test_permission_denied(fs, hdfs, tmp_path):
    """alice's directory, mode 700: bob can neither read nor list nor write
    in it; alice can; the user is HADOOP_USER_NAME, or the login name."""
    data = blob(777, "alice")
    tmp_path = tmp_path / "w"
    tmp_path.mkdir()
    (tmp_path / "x").write_bytes(data)
    fs.ok("mkdir", hdfs.url("/perm"))
    hdfs.java("-chmod", "777", "/perm")
    fs.ok("mkdir", hdfs.url("/perm/alice"), user="alice")
    fs.ok("put", tmp_path / "x", hdfs.url("/perm/alice/x"), user="alice")
    hdfs.java("-chmod", "700", "/perm/alice", user="alice")
    for args in (("cat", hdfs.url("/perm/alice/x")), ("ls", hdfs.url("/perm/alice")),
                 ("get", hdfs.url("/perm/alice/x"), tmp_path / "got"),
                 ("put", tmp_path / "x", hdfs.url("/perm/alice/y")),
                 ("rm", hdfs.url("/perm/alice/x")), ("mkdir", hdfs.url("/perm/alice/sub"))):
        r = fs(*args, user="bob")
        assert r.returncode == 1, (args, said(r))
        assert "/perm/alice" in r.err and re.search(r"[Pp]ermission denied", r.err), (args, said(r))
        assert r.stdout == b"", said(r)
    assert sorted(os.listdir(tmp_path)) == ["x"]  # get left nothing, not even a part
    assert fs.ok("cat", hdfs.url("/perm/alice/x"), user="alice").stdout == data
    # no HADOOP_USER_NAME: the login name (the superuser here) owns what it writes
    fs.ok("put", tmp_path / "x", hdfs.url("/perm/mine"))
    assert ls_r_java(hdfs, "/perm") == {"/perm/alice": ("d", "alice", 0),
                                        "/perm/alice/x": ("-", "alice", 777),
                                        "/perm/mine": ("-", ME, 777)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_namenode_is_exit_3_at_once(fs, hdfs, tmp_path):
    port = free_port()
    (tmp_path / "x").write_bytes(b"x")
    for args in (("ls", f"hdfs://127.0.0.1:{port}/"), ("cat", f"hdfs://127.0.0.1:{port}/x"),
                 ("put", tmp_path / "x", f"hdfs://127.0.0.1:{port}/x")):
        t0 = time.monotonic()
        r = fs(*args, timeout=60)
        took = time.monotonic() - t0
        assert r.returncode == 3, (args, said(r))
        assert f"127.0.0.1:{port}" in r.err and r.stdout == b"", (args, said(r))
        assert took < 5, (args, took)
    # the same through hdfs:/// and a configuration that names it
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "core-site.xml").write_text(
        (hdfs.conf / "core-site.xml").read_text().replace(f"127.0.0.1:{hdfs.nn}", f"127.0.0.1:{port}"))
    r = fs("ls", "hdfs:///", conf=conf, timeout=60)
    assert r.returncode == 3 and f"127.0.0.1:{port}" in r.err, said(r)


def dn_peers(pid, dn_ports):
    """The DataNodes (numbers) process pid has a TCP connection to."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            t = os.readlink(fd)
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    by_port = {p: n for n, p in dn_ports.items()}
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[9] in inodes and f[3] == "01":  # ESTABLISHED
                port = int(f[2].rsplit(":", 1)[1], 16)
                if port in by_port:
                    out.add(by_port[port])
    return out


def test_a_datanode_stopped_mid_read_loses_no_byte(fs, hdfs, tmp_path):
    """A 40 MiB file in 16 MiB blocks, both replicas of each; loom fs cat
    is stopped from reading on (its stdout not read), the DataNode it is
    reading from is stopped, then the rest is read: every byte, in order."""
    data = blob(40 * MiB, "mid-read")
    (tmp_path / "big").write_bytes(data)
    hdfs.java("-D", f"dfs.blocksize={16 * MiB}", "-put", tmp_path / "big", "/big")
    p = fs.popen("cat", hdfs.url("/big"))
    stopped = None
    try:
        head = b""
        while len(head) < 2 * MiB:
            chunk = os.read(p.stdout.fileno(), 256 * KiB)
            assert chunk, p.stderr.read().decode(errors="replace")
            head += chunk
        time.sleep(0.3)  # loom blocks writing stdout: it holds the block's connection
        peers = dn_peers(p.pid, hdfs.dn_ports)
        stopped = min(peers) if peers else 1
        print(f"loom reads from DataNode(s) {sorted(peers)}: stopping dn{stopped}")
        hdfs.script("datanode", "stop", stopped)
        rest, err = p.communicate(timeout=120)
        out = head + rest
        assert p.returncode == 0, (p.returncode, err.decode(errors="replace"))
        assert len(out) == len(data) and sha(out) == sha(data), \
            f"{len(out)} bytes; the first wrong at {first_difference(out, data)}"
        # the DataNode down (and the NameNode not yet aware of it): read again
        r = fs("cat", hdfs.url("/big"))
        assert r.returncode == 0 and sha(r.stdout) == sha(data), said(r)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if stopped:
            hdfs.script("datanode", "start", stopped)


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def flip(path: Path, offset: int):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_one_corrupt_replica_is_read_around(fs, hdfs, tmp_path):
    """One replica with one byte changed on disk (its .meta as it was):
    every cat gives the exact bytes. Until the corrupt replica has been
    read at least once, the corruption moves to the replica the last cat
    was served from (loom's choice of replica is its own)."""
    data = blob(300 * KiB, "one-corrupt")
    (tmp_path / "f").write_bytes(data)
    hdfs.java("-put", tmp_path / "f", "/one-corrupt")
    reps = hdfs.replicas(data)
    assert sorted(reps) == [1, 2], reps
    block = reps[1].name
    assert reps[2].name == block
    bad, at = 1, 150_000
    flip(reps[bad], at)
    for attempt in range(8):
        before = {i: hdfs.served(i, block) for i in (1, 2)}
        r = fs("cat", hdfs.url("/one-corrupt"))
        assert r.returncode == 0, said(r)
        assert sha(r.stdout) == sha(data), \
            f"cat {attempt} with dn{bad}'s replica corrupt at {at}: other bytes ({len(r.stdout)}, " \
            f"the first wrong at {first_difference(r.stdout, data)})"
        # a DataNode logs a read when it has sent it, which may be after loom is done
        end = time.monotonic() + 3
        while sum(hdfs.served(i, block) for i in (1, 2)) == sum(before.values()) and \
                time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.2)
        after = {i: hdfs.served(i, block) for i in (1, 2)}
        if after[bad] > before[bad]:
            # the corrupt replica was read, and the good one gave what it could not
            assert after[3 - bad] > before[3 - bad], (before, after)
            break
        flip(reps[bad], at)  # mended: the other one is the one loom reads
        bad = 3 - bad
        flip(reps[bad], at)
    else:
        raise AssertionError("loom never read the corrupt replica in 8 tries, wherever it was")


def test_both_replicas_corrupt_is_an_error_naming_the_block(fs, hdfs, tmp_path):
    data = blob(300 * KiB, "both-corrupt")
    (tmp_path / "f").write_bytes(data)
    hdfs.java("-put", tmp_path / "f", "/both-corrupt")
    reps = hdfs.replicas(data)
    assert sorted(reps) == [1, 2], reps
    block = reps[1].name  # blk_<id>
    at = 200_000
    chunk = at // 512 * 512
    for p in reps.values():
        flip(p, at)
    r = fs("cat", hdfs.url("/both-corrupt"))
    assert r.returncode == 1, said(r)
    assert "/both-corrupt" in r.err and re.search(rf"\b{block}(_\d+)?\b", r.err), said(r)
    out = r.stdout
    assert out == data[:len(out)], f"stdout differs from the file at {first_difference(out, data)}"
    assert len(out) <= chunk, f"{len(out)} bytes out: past the start of the bad chunk at {chunk}"
    # get: no file with bytes that are not the file's
    local = tmp_path / "got"
    r = fs("get", hdfs.url("/both-corrupt"), local)
    assert r.returncode == 1 and re.search(rf"\b{block}(_\d+)?\b", r.err), said(r)
    if local.exists():
        got = local.read_bytes()
        assert got == data[:len(got)] and len(got) <= chunk, len(got)
    # the bytes before the bad chunk are there to read: a file beside it is unharmed
    hdfs.java("-put", tmp_path / "f", "/both-corrupt-copy")
    assert sha(fs.ok("cat", hdfs.url("/both-corrupt-copy")).stdout) == sha(data)
