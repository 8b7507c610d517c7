"""HDFS where loom jobs use it, against a real HDFS (a NameNode and two
DataNodes, replication 2: conftest's `hdfs`, the test run's one Hadoop
cluster): the data feed reading every format from hdfs:// globs
(files of several 1 MiB blocks, so splits and records cross block
boundaries) and committing its output on HDFS exactly once, also when a
worker is SIGKILLed mid-split and restarted; checkpoints (loom/ckpt.h) in
an hdfs:// directory, atomic under kills, keep N, a damaged newest one
skipped; TensorBoard summaries copied to HDFS while the writer runs and
whole at its end. What loom wrote is read back by loom's own client and
checked record by record (test_hdfs.py checks that client against
Hadoop's Java one)."""
import os
import random
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, LOOM
from test_feed import tfrecord
from test_summary import decode_file, scalars

PROBE = BUILD / "examples/feed-probe/feedprobe"
CKPT = BUILD / "examples/ckpt-demo/ckpt-demo"
SUMMARY = BUILD / "examples/ckpt-demo/summary-demo"
MiB = 1 << 20


@pytest.fixture
def small_blocks(hdfs, tmp_path):
    """A client configuration with 1 MiB blocks (the NameNode's least)."""
    conf = tmp_path / "conf-1m"
    conf.mkdir()
    for f in hdfs.conf.glob("*.xml"):
        text = f.read_text()
        if f.name == "hdfs-site.xml":
            text = text.replace("</configuration>",
                                "<property><name>dfs.blocksize</name><value>1m</value>"
                                "</property></configuration>")
        (conf / f.name).write_text(text)
    return conf


def fs(conf, *args, check=True, **kw):
    r = subprocess.run([str(LOOM), "fs", *map(str, args)], capture_output=True,
                       env=dict(os.environ, HADOOP_CONF_DIR=str(conf)), timeout=120, **kw)
    if check:
        assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))
    return r


def records_in(fmt, seed, n):
    rnd = random.Random(seed)
    if fmt == "lines":
        return [f"{seed}-{j:06d}-" + "x" * rnd.randrange(40) for j in range(n)]
    return [f"{seed}-{j:05d}"[-8:].rjust(8, "0") for j in range(n)]  # 8 bytes each


def encode(fmt, recs):
    if fmt == "lines":
        return "".join(r + "\n" for r in recs).encode()
    raw = [r.encode() for r in recs]
    if fmt == "tfrecord":
        return tfrecord(raw)
    if fmt == "idx":  # uint8, n x 2 x 4: a record is 8 bytes
        return bytes([0, 0, 8, 3]) + struct.pack(">III", len(raw), 2, 4) + b"".join(raw)
    return b"".join(raw)


def part_records(conf, url):
    """Every output record of the committed part-* files under url."""
    ls = fs(conf, "ls", url).stdout.decode().splitlines()
    parts = [l.split()[-1] for l in ls if re.search(r"/part-\d{5}(-e\d+)?$", l)]
    assert parts, ls
    got = []
    for line in fs(conf, "cat", *parts).stdout.splitlines():
        assert line.startswith(b"out:"), line
        got.append(line[4:].decode())
    return got, ls


@pytest.mark.parametrize("fmt", ["lines", "tfrecord", "idx", "fixed"])
def test_the_feed_reads_hdfs_and_commits_its_output_there_exactly_once(loom, hdfs, small_blocks,
                                                                        fmt):
    base = f"/feed-{fmt}-{os.getpid()}"
    want = []
    for i in range(2):
        recs = records_in(fmt, f"f{i}", 120_000 if fmt == "lines" else 300_000)
        want += recs
        local = loom.tmp / f"in-{i}"
        local.write_bytes(encode(fmt, recs))
        assert local.stat().st_size > 2 * MiB  # blocks of 1 MiB: records cross them
        fs(small_blocks, "put", local, hdfs.url(f"{base}/in/in-{i}.{fmt}"))
    fstr = "fixed:8" if fmt == "fixed" else fmt
    spec = loom.spec(f"""
name: hfeed
roles:
  worker: {{instances: 3, command: [{PROBE}, --batch, "16"]}}
feed: {{input: ["{hdfs.url(base)}/in/in-*"], format: "{fstr}", output: "{hdfs.url(base)}/out"}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "400000",
                                   "HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    st = loom.state()["feed"]
    assert st["finished"] and st["committed"] == st["splits"] >= 10, st
    # every task runs on 127.0.0.1, where both DataNodes are: each lease
    # went to a task on a host holding its split's first block
    assert st["data_local"] >= st["splits"], st
    got, ls = part_records(hdfs.conf, hdfs.url(f"{base}/out"))
    assert len(got) == len(want) and sorted(got) == sorted(want)
    assert not any("/.tmp" in l for l in ls), ls  # the dispatcher's temporary directory is gone


def test_feed_output_on_hdfs_is_exactly_once_when_a_worker_is_killed(loom, hdfs):
    base = f"/feedkill-{os.getpid()}"
    want = []
    for i in range(3):
        recs = records_in("lines", f"k{i}", 600)
        want += recs
        local = loom.tmp / f"k{i}.txt"
        local.write_bytes(encode("lines", recs))
        fs(hdfs.conf, "put", local, hdfs.url(f"{base}/in/k{i}.txt"))
    marker = loom.tmp / "died"
    spec = loom.spec(f"""
name: hfeedkill
restart: task
max_restarts: 1
roles:
  worker: {{command: [{PROBE}, --sleep-us, "200"]}}
  flaky: {{command: [{PROBE}, --sleep-us, "200", --die-after, "150", --marker, "{marker}"]}}
feed: {{input: ["{hdfs.url(base)}/in/*.txt"], format: lines, epochs: 2,
        output: "{hdfs.url(base)}/out"}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000",
                                   "HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert marker.exists()
    restarted = [t["task"] for t in loom.state()["tasks"] if t.get("attempt", 0) >= 1]
    assert restarted == ["flaky:0"], loom.state()["tasks"]
    assert "it will be read again" in r.stderr
    got, ls = part_records(hdfs.conf, hdfs.url(f"{base}/out"))
    for epoch in (0, 1):  # each epoch: every record exactly once
        parts = [l.split()[-1] for l in ls if l.endswith(f"-e{epoch}")]
        recs = [l[4:].decode() for l in fs(hdfs.conf, "cat", *parts).stdout.splitlines()]
        assert sorted(recs) == sorted(want), epoch


def ckpt(conf, *args, check=True):
    r = subprocess.run([str(CKPT), *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, HADOOP_CONF_DIR=str(conf)), timeout=120)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def test_checkpoints_on_hdfs_are_atomic_kept_and_checked(hdfs, tmp_path):
    d = hdfs.url(f"/ckpt-{os.getpid()}")
    # a saver killed mid-upload leaves its local copy in its TMPDIR (in a
    # job, the task's own, which its agent removes): here, the test's
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # a saver SIGKILLed at random moments, again and again: the newest
    # valid checkpoint is never older than the last save it reported
    rnd = random.Random(7)
    last = -1
    for _ in range(4):
        p = subprocess.Popen([str(CKPT), "save", d, "--keep", "3", "--kib", "512"],
                             stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, HADOOP_CONF_DIR=str(hdfs.conf),
                                      TMPDIR=str(scratch)))
        time.sleep(0.3 + rnd.random() * 0.8)
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate(timeout=30)
        saved = [int(l.split()[1]) for l in out.splitlines() if l.startswith("saved ")]
        last = max([last, *saved])
        r = ckpt(hdfs.conf, "check", d, "--kib", "512")
        m = re.fullmatch(r"ok (\d+)\n", r.stdout)
        # none yet is right only while no save was reported (a busy machine)
        assert (m and int(m[1]) >= last) or (last < 0 and r.stdout == "none\n"), (r.stdout, last)
    assert last >= 3, "the saver never got far: raise the sleeps"
    names = [l.split()[-1] for l in fs(hdfs.conf, "ls", d).stdout.decode().splitlines()]
    steps = sorted(int(re.search(r"ckpt-(\d+)\.ckpt$", n)[1]) for n in names
                   if n.endswith(".ckpt"))
    # keep 3, plus the one a saver killed between publishing a checkpoint
    # and pruning the oldest leaves (CI saw it); the next save prunes back
    assert len(steps) <= 4 and steps[-1] >= last, names
    r = subprocess.run([str(CKPT), "save", d, "--count", "1", "--keep", "3", "--kib", "512"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, HADOOP_CONF_DIR=str(hdfs.conf), TMPDIR=str(scratch)))
    top = steps[-1] + 1
    assert r.returncode == 0 and r.stdout == f"saved {top}\n", r.stdout + r.stderr
    last = top
    names = [l.split()[-1] for l in fs(hdfs.conf, "ls", d).stdout.decode().splitlines()]
    steps = sorted(int(re.search(r"ckpt-(\d+)\.ckpt$", n)[1]) for n in names
                   if n.endswith(".ckpt"))
    assert steps == [top - 2, top - 1, top], names
    # the newest damaged (a truncated copy put in its place): latest falls
    # back to the one before, and restoring it names the damage
    newest = steps[-1]
    bad = Path(os.environ.get("TMPDIR", "/tmp")) / f"bad-{os.getpid()}.ckpt"
    raw = fs(hdfs.conf, "cat", f"{d}/ckpt-{newest:012d}.ckpt").stdout
    bad.write_bytes(raw[:len(raw) // 2])
    try:
        fs(hdfs.conf, "put", "-f", bad, f"{d}/ckpt-{newest:012d}.ckpt")
    finally:
        bad.unlink()
    r = ckpt(hdfs.conf, "check", d, "--kib", "512")
    assert r.stdout == f"ok {steps[-2]}\n", (r.stdout, r.stderr, steps)
    r = ckpt(hdfs.conf, "restore", d, newest, "--kib", "512", check=False)
    assert r.returncode == 1 and f"ckpt-{newest:012d}.ckpt" in r.stderr, r.stderr
    assert "truncated" in r.stderr or "short" in r.stderr or "size" in r.stderr, r.stderr


def test_summaries_reach_hdfs_while_the_writer_runs(hdfs, tmp_path):
    d = hdfs.url(f"/tb-{os.getpid()}/run")
    env = dict(os.environ, HADOOP_CONF_DIR=str(hdfs.conf), LOOM_SUMMARY_UPLOAD_MS="300")
    p = subprocess.Popen([str(SUMMARY), d, "--steps", "20", "--hold", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        seen = 0
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline and seen <= 100:
            r = fs(hdfs.conf, "ls", d, check=False)
            if r.returncode == 0 and r.stdout:
                seen = int(r.stdout.split()[4])  # perm repl owner group size ...
            time.sleep(0.2)
        # the writer is still holding (it has not closed): the periodic copy
        # brought its values before the end
        assert p.poll() is None, "the writer ended before the copy was seen"
        assert seen > 100, seen
    finally:
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, (out, err)
    names = [l.split()[-1] for l in fs(hdfs.conf, "ls", d).stdout.decode().splitlines()]
    assert len(names) == 1 and "/events.out.tfevents." in names[0], names
    local = tmp_path / Path(names[0]).name
    fs(hdfs.conf, "get", names[0], local)
    got = scalars(decode_file(local))
    assert got["loss"] == {s: pytest.approx(1 / (1 + s), rel=1e-6) for s in range(20)}
    assert got["train/accuracy"] == {s: pytest.approx(s / 100, rel=1e-6) for s in range(20)}
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    assert not list(tmp.glob("loom-summary-*")), "the writer's local copy was left"


def test_the_parameter_server_checkpoints_on_hdfs_and_resumes_from_them(loom, hdfs, tmp_path):
    """test_ps's killed-ps job with LOOM_PS_CKPT_DIR on HDFS: shard files,
    manifests and LATEST there, and the retried attempt resumes from them
    with every sum exact."""
    from test_ps import PROBE as PSPROBE, ps_pids
    ck = hdfs.url(f"/psckpt-{os.getpid()}")

    def spec(name, out, sleep_ms, retries, ckdir):
        env = f"env: {{LOOM_PS_CKPT_DIR: '{ckdir}', HADOOP_CONF_DIR: '{hdfs.conf}'}}" if ckdir else ""
        return loom.spec(f"""
name: {name}
retries: {retries}
{env}
roles:
  ps: {{instances: 2, command: [{LOOM}, ps]}}
  chief: {{command: [{PSPROBE}, ckpt, {out}, '30', '5', '{sleep_ms}']}}
  worker: {{command: [{PSPROBE}, ckpt, {out}, '30', '5', '{sleep_ms}']}}
""", name=f"{name}.yaml")

    ref_out, out = tmp_path / "ref.json", tmp_path / "resumed.json"
    r = loom.run("run", spec("hpsref", ref_out, 0, 0, None), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    p = loom.popen("run", spec("hpskill", out, 40, 1, ck))

    def latest():
        r = fs(hdfs.conf, "cat", f"{ck}/LATEST", check=False)
        return int(r.stdout) if r.returncode == 0 and r.stdout.strip() else -1
    loom.wait_for(lambda: latest() >= 10, timeout=90, what="a checkpoint of step 10 on HDFS")
    pids = ps_pids(loom, 0)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stdout + stderr
    m = re.findall(r"RESTORED rank=(\d) attempt=1 step=(\d+)", stdout)
    assert len(m) == 2 and all(int(s) >= 10 for _, s in m), stdout
    import json
    got, ref = json.loads(out.read_text()), json.loads(ref_out.read_text())
    for k in ("dense", "rows"):
        assert got[k] == ref[k], f"{k} differs from the uninterrupted run"
    steps = [l.split()[-1] for l in fs(hdfs.conf, "ls", ck).stdout.decode().splitlines()]
    assert any(s.endswith(f"/step-{latest():012d}") for s in steps), steps
    shards = fs(hdfs.conf, "ls", f"{ck}/step-{latest():012d}").stdout.decode()
    assert "shard-0-of-2.bin" in shards and "shard-1-of-2.bin" in shards and "MANIFEST.json" in shards


def test_the_python_module_reads_and_writes_the_feed_on_hdfs(loom, hdfs):
    """examples/feed-probe/feedprobe.py (the loom module over libloom) with
    the input and the output on HDFS: every record once per epoch."""
    from conftest import LIBLOOM, ROOT, yaml_env
    from test_feed import PY, PYPROBE
    if not LIBLOOM.exists():
        pytest.skip(f"{LIBLOOM} is not built")
    base = f"/feedpy-{os.getpid()}"
    want = []
    for i in range(2):
        recs = records_in("lines", f"p{i}", 800)
        want += recs
        local = loom.tmp / f"p{i}.txt"
        local.write_bytes(encode("lines", recs))
        fs(hdfs.conf, "put", local, hdfs.url(f"{base}/in/p{i}.txt"))
    env = yaml_env({"PYTHONPATH": ROOT / "python", "LOOM_LIBRARY": LIBLOOM,
                    "HADOOP_CONF_DIR": hdfs.conf})
    spec = loom.spec(f"""
name: hfeedpy
env: {env}
roles:
  worker: {{instances: 2, command: [{PY}, {PYPROBE}, --mode, batch]}}
feed: {{input: ["{hdfs.url(base)}/in/*.txt"], format: lines, epochs: 2,
        output: "{hdfs.url(base)}/out"}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000",
                                   "HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got, _ = part_records(hdfs.conf, hdfs.url(f"{base}/out"))
    assert sorted(got) == sorted(want * 2)


def test_files_and_archives_from_hdfs_reach_every_task(loom, hdfs, tmp_path):
    """files: and archives: sources given as hdfs:// URLs (a file, a
    directory, a .tar.gz) are fetched when the job starts and appear at
    their targets in every task's directory; a missing one fails the job
    before any task runs, naming it (exit 3)."""
    src = tmp_path / "src"
    (src / "dir" / "sub").mkdir(parents=True)
    (src / "one.txt").write_text("file one\n")
    (src / "dir" / "sub" / "x.txt").write_text("in dir\n")
    (src / "env").mkdir()
    (src / "env" / "mod.py").write_text("print('from the archive')\n")
    subprocess.run(["tar", "-C", str(src / "env"), "-czf", str(src / "pyenv.tar.gz"), "mod.py"],
                   check=True)
    base = f"/files-{os.getpid()}"
    fs(hdfs.conf, "put", src / "one.txt", hdfs.url(f"{base}/one.txt"))
    fs(hdfs.conf, "put", src / "pyenv.tar.gz", hdfs.url(f"{base}/pyenv.tar.gz"))
    fs(hdfs.conf, "put", src / "dir" / "sub" / "x.txt", hdfs.url(f"{base}/dir/sub/x.txt"))
    spec = loom.spec(f"""
name: hfiles
files: {{one.txt: "{hdfs.url(base)}/one.txt", data: "{hdfs.url(base)}/dir"}}
archives: {{pyenv: "{hdfs.url(base)}/pyenv.tar.gz"}}
roles:
  worker:
    instances: 2
    command: "cat one.txt data/sub/x.txt; /usr/bin/python3 pyenv/mod.py"
""")
    r = loom.run("run", spec, env={"HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    for w in ("worker:0", "worker:1"):
        for line in ("file one", "in dir", "from the archive"):
            assert f"[{w}] {line}" in r.stdout, r.stdout
    ev = [e for e in loom.events() if e["event"] == "files_fetched"]
    assert ev and set(ev[0]["files"]) == {"one.txt", "data", "pyenv"}, ev
    # a source that is not there: the job fails at once, naming it
    spec = loom.spec(f"""
name: hfilesmissing
files: {{gone.txt: "{hdfs.url(base)}/gone.txt"}}
roles:
  worker: {{command: "true"}}
""", name="missing.yaml")
    r = loom.run("run", spec, env={"HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"files.gone.txt: cannot fetch {hdfs.url(base)}/gone.txt" in r.stderr, r.stderr
    assert "no such file or directory" in r.stderr, r.stderr


def test_feed_input_on_a_missing_path_or_an_unreachable_namenode(loom, hdfs):
    """A glob that matches nothing on HDFS is the spec's error (exit 2); a
    NameNode that is not there is the cluster's (exit 3), at once; both
    name what they were given."""
    for url, code, said in (
            (hdfs.url("/no-such-dir/*.txt"), 2, "matches no file"),
            ("hdfs://127.0.0.1:1/data/*.txt", 3, "the NameNode at 127.0.0.1:1: cannot connect")):
        spec = loom.spec(f"""
name: hfeedbad
roles:
  worker: {{command: [{PROBE}]}}
feed: {{input: ["{url}"], format: lines}}
""")
        t0 = time.monotonic()
        r = loom.run("run", spec, env={"HADOOP_CONF_DIR": str(hdfs.conf)}, timeout=60)
        assert r.returncode == code, r.stdout + r.stderr
        assert url in r.stderr and said in r.stderr, r.stderr
        assert time.monotonic() - t0 < 20
