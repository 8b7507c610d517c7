"""loom ships itself to YARN (issue 31.2): every container, the managed
application master's included, runs the loom executable YARN localized
into it (a LocalResource staged once per content hash in the per-user
cache hdfs:///user/<user>/.loom/cache/<sha256>/loom), never the client's
build directory; a second job with the same binary uploads nothing, which
the DataNodes' own count of bytes written (their JMX) shows. On the test
run's one Hadoop cluster (conftest's `yarn` and `hdfs`)."""
import hashlib
import os
import pwd
from pathlib import Path

import pytest

import clusters
from clusters import hadoop_available
from conftest import LOOM, SAN_REPORT, loom_pids_of

pytestmark = pytest.mark.skipif(
    not hadoop_available(),
    reason="java and mvn are not installed (scripts/setup.sh installs a JDK and Maven)")

SHA = hashlib.sha256(LOOM.read_bytes()).hexdigest()
SIZE = LOOM.stat().st_size


@pytest.fixture
def sloom(loom, yarn, hdfs):
    loom.env["HADOOP_CONF_DIR"] = str(yarn.conf)
    yield loom
    live = [a for a in yarn.apps() if a["state"] in ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED",
                                                      "RUNNING")]
    assert not live, live
    loom.wait_for(lambda: not loom_pids_of(loom.home), timeout=15,
                  what="every process of the test's jobs to end")
    # what the agents and the AM's coordinator wrote in their containers'
    # log directories: no sanitizer report there either
    for f in yarn.dir.glob("nm*/logs/application_*/container_*/std*"):
        text = f.read_text(errors="replace")
        m = SAN_REPORT.search(text)
        assert not m, f"{f}:\n{text[m.start():][:3000]}"


def cache_url(hdfs):
    user = os.environ.get("HADOOP_USER_NAME") or pwd.getpwuid(os.getuid()).pw_name
    return hdfs.url(f"/user/{user}/.loom/cache/{SHA}")


def procs_of(home, word):
    """{pid: /proc/pid/exe} of the processes `./loom WORD` of this LOOM_HOME's
    jobs (their environment names it)."""
    out = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            env = (p / "environ").read_bytes()
            exe = os.readlink(p / "exe")
        except OSError:
            continue
        if cmd[1:2] == [word.encode()] and str(home).encode() in env:
            out[int(p.name)] = (cmd[0].decode(), exe)
    return out


def assert_localized(yarn, procs, n):
    """n processes, each started as ./loom and running the copy YARN
    localized into a NodeManager's local directory, byte for byte the
    build's loom, never the build's file itself."""
    assert len(procs) == n, procs
    local = [str((yarn.dir / f"nm{i}" / "local").resolve()) for i in (1, 2)]
    for pid, (argv0, exe) in procs.items():
        assert argv0 == "./loom", (pid, argv0)
        assert exe != str(LOOM.resolve()), (pid, exe)
        assert any(exe.startswith(d + "/") for d in local), (pid, exe, local)
        assert "/filecache/" in exe and exe.endswith("/loom"), (pid, exe)
        assert hashlib.sha256(Path(exe).read_bytes()).hexdigest() == SHA, exe


def shipped(events):
    ev = [e for e in events if e.get("event") == "binary_shipped"]
    assert len(ev) == 1, ev
    return ev[0]


def wait_spec(loom, name, n, go):
    return loom.spec(f"""
name: {name}
backend: yarn
roles:
  worker: {{instances: {n}, command: 'echo up $LOOM_TASK; while [ ! -e {go} ]; do sleep 0.05; done; echo bye'}}
""", name=f"{name}.yaml")


def test_run_agents_run_the_localized_copy(sloom, yarn, hdfs, tmp_path):
    """`loom run --backend yarn`: each task's agent runs ./loom from its
    container, the file YARN localized from the cache; the job's events
    name the cached copy and its hash."""
    go = tmp_path / "go"
    s = wait_spec(sloom, "yship", 2, go)
    p = sloom.popen("run", s)
    try:
        sloom.wait_running(timeout=90)
        agents = sloom.wait_for(lambda: len(procs_of(sloom.home, "agent")) == 2 and
                                procs_of(sloom.home, "agent"), timeout=20,
                                what="both agents")
        assert_localized(yarn, agents, 2)
        go.write_text("")
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    assert p.returncode == 0, err
    assert "[worker:0] bye" in out and "[worker:1] bye" in out, out
    ev = shipped(sloom.events())
    assert ev["path"] == f"{cache_url(hdfs)}/loom", ev
    assert ev["sha256"] == SHA and ev["size"] == SIZE and ev["inherited"] is False, ev
    assert "loom's executable for the containers: " + ev["path"] in err, err
    # the cache holds the one file, nothing half-written beside it
    ls = sloom.run("fs", "ls", cache_url(hdfs))
    assert ls.returncode == 0, ls.stderr
    names = [l.split()[-1].rsplit("/", 1)[-1] for l in ls.stdout.splitlines()
             if l[:1] in ("-", "d")]
    assert names == ["loom"], ls.stdout


def test_submit_the_managed_am_and_its_agents_run_the_localized_copy(sloom, yarn, hdfs, tmp_path):
    """`loom submit`: the application master's coordinator runs ./loom from
    its own container, and hands the client's staged copy to its tasks
    without staging it again."""
    go = tmp_path / "go"
    s = wait_spec(sloom, "yshipsub", 2, go)
    r = sloom.run("submit", s, timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    try:
        coord = sloom.wait_for(lambda: procs_of(sloom.home, "coordinator"), timeout=60,
                               what="the application master's coordinator")
        assert_localized(yarn, coord, 1)
        agents = sloom.wait_for(lambda: len(procs_of(sloom.home, "agent")) == 2 and
                                procs_of(sloom.home, "agent"), timeout=90, what="both agents")
        assert_localized(yarn, agents, 2)
    finally:
        go.write_text("")

    def done():
        st = sloom.run("status", job)
        return "state    succeeded" in st.stdout and st
    sloom.wait_for(done, timeout=90, what="the submitted job to succeed")
    logs = sloom.run("logs", job).stdout
    assert "[worker:0] bye" in logs and "[worker:1] bye" in logs, logs
    ev = shipped(sloom.events(sloom.home / "jobs" / job))
    assert ev["inherited"] is True and ev["uploaded"] == 0, ev
    assert ev["path"] == f"{cache_url(hdfs)}/loom" and ev["size"] == SIZE, ev


def dn_bytes_written(hdfs):
    return clusters.dn_bytes_written(f"127.0.0.1:{hdfs.ports[f'dn{i}-web']}" for i in (1, 2))


def settled_bytes(sloom, hdfs, tag):
    """dn_bytes_written once it counts everything written before this call:
    a marker file of a size of its own is written, and the count read until
    it has grown by at least that (the DataNodes' metrics reach JMX on their
    own period)."""
    marker = sloom.tmp / f"marker-{tag}"
    marker.write_bytes(os.urandom(4096 + 7))
    before = dn_bytes_written(hdfs)
    r = sloom.run("fs", "put", "-f", marker, hdfs.url(f"/loom-ship-test/{tag}"))
    assert r.returncode == 0, r.stderr
    return sloom.wait_for(lambda: (lambda v: v >= before + marker.stat().st_size and v)(
        dn_bytes_written(hdfs)), timeout=60, what="the DataNodes' metrics to count the marker")


def test_second_job_uploads_nothing(sloom, hdfs, tmp_path):
    """With the cache emptied, a job uploads the binary (the DataNodes count
    at least its size written); the next job with the same binary finds it
    there and writes nothing of it to HDFS."""
    sloom.run("fs", "rm", "-r", cache_url(hdfs))
    assert sloom.run("fs", "stat", cache_url(hdfs)).returncode == 1
    s = sloom.spec("""
name: yshipcache
backend: yarn
roles:
  worker: {instances: 1, command: 'echo ran'}
""")
    counts, took = [], []
    for k in range(2):
        before = settled_bytes(sloom, hdfs, f"before{k}")
        r = sloom.run("run", s, timeout=120)
        assert r.returncode == 0, r.stderr
        after = settled_bytes(sloom, hdfs, f"after{k}")
        marker = (sloom.tmp / f"marker-after{k}").stat().st_size
        counts.append(after - before)
        jd = max(sloom.jobs(), key=lambda d: d.stat().st_mtime)
        ev = shipped(sloom.events(jd))
        assert ev["uploaded"] == (SIZE if k == 0 else 0), ev
        assert ("uploaded" if k == 0 else "cached already") in r.stderr, r.stderr
        took.append(ev["ms"])
    # the first: the binary at least once (each replica counts), and the marker
    assert counts[0] >= SIZE, counts
    # the second: the marker's replicas at most; nothing near the binary's size
    assert counts[1] < SIZE // 10, (counts, SIZE)
    print(f"\nbytes written to HDFS: first job {counts[0]}, second job {counts[1]} "
          f"(binary {SIZE}); staging took {took[0]} ms, then {took[1]} ms")
    sloom.run("fs", "rm", "-r", hdfs.url("/loom-ship-test"))


def test_a_bad_cached_copy_is_replaced(sloom, hdfs):
    """A cached file of the wrong size (a truncated copy, a foreign file) is
    not trusted: the client stages the binary over it, and the job runs."""
    url = f"{cache_url(hdfs)}/loom"
    bad = sloom.tmp / "short"
    bad.write_bytes(b"not loom\n")
    assert sloom.run("fs", "mkdir", cache_url(hdfs)).returncode == 0
    r = sloom.run("fs", "put", "-f", bad, url)
    assert r.returncode == 0, r.stderr
    s = sloom.spec("""
name: yshipbad
backend: yarn
roles:
  worker: {instances: 1, command: 'echo ran'}
""")
    r = sloom.run("run", s, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "[worker:0] ran" in r.stdout, r.stdout
    ev = shipped(sloom.events())
    assert ev["uploaded"] == SIZE and ev["size"] == SIZE, ev
    got = sloom.tmp / "got"
    r = sloom.run("fs", "get", url, got)
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(got.read_bytes()).hexdigest() == SHA


def test_two_clients_staging_the_same_binary_at_once_leave_one_good_copy(sloom, hdfs):
    """Two jobs start at once with the cache empty: both may upload, one
    rename wins, both jobs run, and the cache holds one copy, the binary
    byte for byte, nothing half-written beside it."""
    sloom.run("fs", "rm", "-r", cache_url(hdfs))
    assert sloom.run("fs", "stat", cache_url(hdfs)).returncode == 1
    ps = []
    for i in range(2):
        s = sloom.spec(f"""
name: yshiprace{i}
backend: yarn
roles:
  worker: {{instances: 1, command: 'echo ran {i}'}}
""", name=f"race{i}.yaml")
        ps.append(sloom.popen("run", s))
    try:
        outs = [p.communicate(timeout=120) for p in ps]
    finally:
        for p in ps:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    for i, (p, (out, err)) in enumerate(zip(ps, outs)):
        assert p.returncode == 0, err
        assert f"[worker:0] ran {i}" in out, out
    evs = [shipped(sloom.events(jd)) for jd in sloom.jobs()]
    assert len(evs) == 2 and all(e["path"] == f"{cache_url(hdfs)}/loom" for e in evs), evs
    assert SIZE <= sum(e["uploaded"] for e in evs) <= 2 * SIZE, evs
    ls = sloom.run("fs", "ls", cache_url(hdfs))
    names = [l.split()[-1].rsplit("/", 1)[-1] for l in ls.stdout.splitlines()
             if l[:1] in ("-", "d")]
    assert names == ["loom"], ls.stdout
    got = sloom.tmp / "got"
    assert sloom.run("fs", "get", f"{cache_url(hdfs)}/loom", got).returncode == 0
    assert hashlib.sha256(got.read_bytes()).hexdigest() == SHA


def test_without_hdfs_the_cache_is_in_loom_home(sloom, yarn, tmp_path):
    """A client whose fs.defaultFS is not HDFS (a one-host cluster) caches the
    binary under its loom home, and the NodeManagers localize it from there
    (file://): the job runs, the second time without copying."""
    import re
    import shutil
    conf = tmp_path / "conf"
    shutil.copytree(yarn.conf, conf)
    core = conf / "core-site.xml"
    text, n = re.subn(r"(<name>fs.defaultFS</name><value>)[^<]*", r"\1file:///", core.read_text())
    assert n == 1
    core.write_text(text)
    s = sloom.spec("""
name: yshiplocal
backend: yarn
roles:
  worker: {instances: 1, command: 'echo ran'}
""")
    for k in range(2):
        r = sloom.run("run", s, env={"HADOOP_CONF_DIR": str(conf)}, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "[worker:0] ran" in r.stdout, r.stdout
        jd = max(sloom.jobs(), key=lambda d: d.stat().st_mtime)
        ev = shipped(sloom.events(jd))
        assert ev["path"] == str(sloom.home / "cache" / SHA / "loom"), ev
        assert ev["uploaded"] == (SIZE if k == 0 else 0), ev
    cached = sloom.home / "cache" / SHA
    assert [p.name for p in cached.iterdir()] == ["loom"]
    assert hashlib.sha256((cached / "loom").read_bytes()).hexdigest() == SHA
