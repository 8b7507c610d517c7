"""The data feed through real jobs: every record exactly once across
workers, with a process killed mid-split, after a whole-job retry, and
past an expired lease whose stale holder tries to commit; reproducible
shuffles; every format; corrupt and bad input reported with file and
offset; the Python module and the PyTorch example."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, LIBLOOM, ROOT, pylib_env, yaml_env

PROBE = BUILD / "examples/feed-probe/feedprobe"
PYPROBE = ROOT / "examples/feed-probe/feedprobe.py"
PY = "/usr/bin/python3"


# Python loads the libloom under test (ASan's with the ASan runtime
# preloaded); see conftest.pylib_env().
needs_pylib = pytest.mark.skipif(not LIBLOOM.exists(), reason=f"{LIBLOOM} is not built")


def lines_input(tmp: Path, nfiles=4, per=500, sub="data"):
    """nfiles text files of per distinct lines each; returns the lines."""
    d = tmp / sub
    d.mkdir()
    recs = []
    for i in range(nfiles):
        lines = [f"f{i}-r{j:05d}-" + "x" * (j % 37) for j in range(per)]
        (d / f"part-{i}.txt").write_text("".join(l + "\n" for l in lines))
        recs += lines
    return recs


def outputs(out: Path, pattern="part-*"):
    """Every record of the committed output, from part-* files only."""
    got = []
    for p in sorted(out.glob(pattern)):
        for line in p.read_bytes().splitlines():
            assert line.startswith(b"out:"), (p, line)
            got.append(line[4:].decode())
    return got


def assert_exactly_once(out: Path, recs):
    got = outputs(out)
    assert len(got) == len(recs), f"{len(got)} output records for {len(recs)} inputs"
    assert sorted(got) == sorted(recs)
    assert not list((out / ".tmp").glob("*")) if (out / ".tmp").exists() else True


def feed_status(loom):
    return loom.state()["feed"]


@pytest.mark.parametrize("how", [["--batch", "0"], ["--batch", "7"], ["--read", "7"]],
                         ids=["next", "batch", "read_offsets"])
def test_every_record_exactly_once_across_workers(loom, how):
    recs = lines_input(loom.tmp)
    spec = loom.spec(f"""
name: feedonce
roles:
  worker: {{instances: 3, command: [{PROBE}, {how[0]}, "{how[1]}", --sleep-us, "20"]}}
feed: {{input: [data/*.txt], format: lines, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert_exactly_once(loom.tmp / "out", recs)
    st = feed_status(loom)
    assert st["finished"] and st["committed"] == st["splits"] and st["splits"] >= 12
    assert st["records"] == len(recs)
    oks = re.findall(r"FEEDOK task=(\S+) records=(\d+)", r.stdout)
    assert len(oks) == 3 and sum(int(n) for _, n in oks) == len(recs)
    assert not (loom.tmp / "out/.tmp").exists()  # the dispatcher cleans up


def test_killed_process_mid_split_its_splits_are_read_again(loom):
    recs = lines_input(loom.tmp)
    marker = loom.tmp / "died"
    # worker:1's first process is SIGKILLed mid-split; its task goes on
    # with a fresh process, as a restarted task would
    cmd = (f"{PROBE} --sleep-us 200 --die-after 150 --marker {marker}; "
           f"exec {PROBE} --sleep-us 200")
    spec = loom.spec(f"""
name: feedkill
roles:
  worker:
    instances: 2
    command: [{PROBE}, --sleep-us, "200"]
  killed: {{command: "{cmd}"}}
feed: {{input: [data/*.txt], format: lines, epochs: 2, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert marker.exists()
    assert "was held by a process whose connection closed: it will be read again" in r.stderr
    for epoch in (0, 1):  # each epoch: every record exactly once
        assert sorted(outputs(loom.tmp / "out", f"part-*-e{epoch}")) == sorted(recs)


def test_killed_task_restarts_and_its_splits_are_read_again(loom):
    recs = lines_input(loom.tmp)
    marker = loom.tmp / "died"
    spec = loom.spec(f"""
name: feedrestart
restart: task
max_restarts: 1
roles:
  worker: {{command: [{PROBE}, --sleep-us, "200"]}}
  flaky: {{command: [{PROBE}, --sleep-us, "200", --die-after, "150", --marker, "{marker}"]}}
feed: {{input: [data/*.txt], format: lines, epochs: 2, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000"})
    assert r.returncode == 0, r.stdout + r.stderr
    restarted = [t["task"] for t in loom.state()["tasks"] if t.get("attempt", 0) >= 1]
    assert restarted == ["flaky:0"], loom.state()["tasks"]
    assert "it will be read again" in r.stderr
    for epoch in (0, 1):
        assert sorted(outputs(loom.tmp / "out", f"part-*-e{epoch}")) == sorted(recs)


def test_a_reader_that_stops_early_gives_its_splits_back(loom):
    recs = lines_input(loom.tmp)
    spec = loom.spec(f"""
name: feedstop
roles:
  quitter: {{command: [{PROBE}, --stop-after, "50"]}}
  worker: {{command: [{PROBE}, --sleep-us, "100"]}}
feed: {{input: [data/*.txt], format: lines, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\[quitter:0\] FEEDOK .*records=5\d ", r.stdout), r.stdout
    assert_exactly_once(loom.tmp / "out", recs)


def test_inference_retry_is_exactly_once(loom):
    recs = lines_input(loom.tmp, nfiles=6, per=400)
    spec = loom.spec(f"""
name: feedretry
retries: 1
roles:
  worker:
    instances: 2
    command: [{PROBE}, --sleep-us, "300"]
  flaky:
    command: [{PROBE}, --sleep-us, "300", --fail-after, "700"]
feed: {{input: [data/*.txt], format: lines, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "2000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failing on purpose" in r.stdout + r.stderr
    ev = [e["event"] for e in loom.events()]
    assert ev.count("attempt_started") == 2
    st = feed_status(loom)
    # some splits were committed in attempt 0 and kept; the rest in attempt 1
    assert st["committed"] == st["splits"]
    assert_exactly_once(loom.tmp / "out", recs)
    assert len(list((loom.tmp / "out").glob("part-*"))) == st["splits"]


def test_expired_lease_is_taken_back_and_its_stale_commit_refused(loom):
    recs = lines_input(loom.tmp, nfiles=3, per=600)
    go = loom.tmp / "go"
    spec = loom.spec(f"""
name: feedexpire
roles:
  worker: {{command: [{PROBE}, --pause-after, "5", --go, "{go}"]}}
  other: {{command: [{PROBE}, --sleep-us, "300"]}}
feed: {{input: [data/*.txt], format: lines, output: out/}}
""")
    p = loom.popen("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000", "LOOM_FEED_LEASE_MS": "1500"})
    try:
        pidfile = Path(f"{go}.pid")
        loom.wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, "the pause")
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGSTOP)  # frozen: no renewals, its leases expire
        go.touch()

        def other_done():
            try:
                return any(t["task"] == "other:0" and t["state"] == "succeeded"
                           for t in loom.state()["tasks"])
            except (OSError, ValueError, KeyError):
                return False
        loom.wait_for(other_done, 60, "the other task to finish every split")
        os.kill(pid, signal.SIGCONT)  # it wakes and finishes its stale split
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, out + err
    m = re.search(r"\[worker:0\] FEEDOK .* stale=(\d+)", out)
    assert m and int(m[1]) == 1, out
    assert "was not renewed within 1500 ms" in err
    assert "refused to finish lease" in err
    st = feed_status(loom)
    assert st["expired"] >= 1 and st["stale"] == 1
    assert_exactly_once(loom.tmp / "out", recs)


def shuffled_order(loom, seed, name):
    spec = loom.spec(f"""
name: {name}
roles:
  worker: {{command: [{PROBE}, --print]}}
feed: {{input: [data/*.txt], format: lines, epochs: 2, shuffle: true, seed: {seed}}}
""", name=f"{name}.yaml")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "2000"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = [l.split(" ", 3)[2:] for l in r.stdout.splitlines() if l.startswith("[worker:0] REC ")]
    return [(int(e), rec) for e, rec in got]


def test_shuffle_is_reproducible_from_the_seed(loom):
    recs = lines_input(loom.tmp, nfiles=3, per=300)
    a = shuffled_order(loom, 7, "shufa")
    b = shuffled_order(loom, 7, "shufb")
    c = shuffled_order(loom, 8, "shufc")
    assert a == b
    assert a != c
    for order in (a, c):
        e0 = [rec for e, rec in order if e == 0]
        e1 = [rec for e, rec in order if e == 1]
        assert sorted(e0) == sorted(recs) and sorted(e1) == sorted(recs)  # each epoch: all, once
        assert e0 != e1 and e0 != recs  # shuffled, and differently each epoch


# ---- formats ---------------------------------------------------------------
CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (0x82F63B78 if _c & 1 else 0)
    CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ CRC_TABLE[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(records):
    out = bytearray()
    for r in records:
        n = struct.pack("<Q", len(r))
        out += n + struct.pack("<I", masked(crc32c(n))) + r + struct.pack("<I", masked(crc32c(r)))
    return bytes(out)


def write_format(d: Path, fmt):
    """Two files of records in fmt; returns (format string, records)."""
    d.mkdir()
    recs = []
    for i in range(2):
        rs = [f"r{i}-{j:05d}".encode() for j in range(700)]  # 8 bytes each
        recs += rs
        if fmt == "tfrecord":
            (d / f"in-{i}.tfrecord").write_bytes(tfrecord(rs))
        elif fmt == "idx":  # uint8, 700 x 2 x 4: a record is 8 bytes
            (d / f"in-{i}.idx").write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">III", 700, 2, 4)
                                            + b"".join(rs))
        else:
            (d / f"in-{i}.bin").write_bytes(b"".join(rs))
    return ("fixed:8" if fmt == "fixed" else fmt), [r.decode() for r in recs]


@pytest.mark.parametrize("fmt", ["tfrecord", "idx", "fixed"])
def test_every_format_through_a_job(loom, fmt):
    fstr, recs = write_format(loom.tmp / "data", fmt)
    spec = loom.spec(f"""
name: feedfmt
roles:
  worker: {{instances: 2, command: [{PROBE}, --batch, "16"]}}
feed: {{input: [data/in-*], format: "{fstr}", output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "1000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert feed_status(loom)["splits"] >= 10  # large files cut on record boundaries
    assert_exactly_once(loom.tmp / "out", recs)


def test_corrupt_tfrecord_names_the_file_and_offset(loom):
    d = loom.tmp / "data"
    d.mkdir()
    recs = [f"record-{j:04d}".encode() for j in range(200)]
    raw = bytearray(tfrecord(recs))
    at = 57 * (16 + 11)  # record 57's offset (every record is 11 bytes)
    raw[at + 12 + 3] ^= 0x10  # one flipped bit in its data
    (d / "bad.tfrecord").write_bytes(bytes(raw))
    spec = loom.spec(f"""
name: feedcrc
roles:
  worker: {{command: [{PROBE}]}}
feed: {{input: [data/*.tfrecord], format: tfrecord}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"{d}/bad.tfrecord: offset {at}: TFRecord data CRC mismatch" in r.stderr


@pytest.mark.parametrize("what,content,fmt,msg", [
    ("idx", bytes([0, 0, 8, 2]) + struct.pack(">II", 10, 5) + b"x" * 49, "idx",
     "the idx header says 10 records of 5 bytes"),
    ("gz", b"\x1f\x8b\x08" + b"x" * 30, "idx", "gzip-compressed"),
    ("bin", b"x" * 10, "fixed:3", "not a multiple of the record size 3"),
])
def test_bad_input_is_refused_at_start(loom, what, content, fmt, msg):
    d = loom.tmp / "data"
    d.mkdir()
    (d / f"bad.{what}").write_bytes(content)
    spec = loom.spec(f"""
name: feedbad
roles:
  worker: {{command: [{PROBE}]}}
feed: {{input: [data/*], format: "{fmt}"}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 2, r.stdout + r.stderr
    assert msg in r.stderr and f"{d}/bad.{what}" in r.stderr


def test_glob_matching_nothing_is_refused(loom):
    spec = loom.spec(f"""
name: feednone
roles:
  worker: {{command: [{PROBE}]}}
feed: {{input: [nowhere/*.txt]}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 2
    assert f"feed.input '{loom.tmp}/nowhere/*.txt' matches no file" in r.stderr


def test_a_job_without_feed_says_so(loom):
    spec = loom.spec(f"""
name: feedless
roles:
  worker: {{command: [{PROBE}]}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 1
    assert "LOOM_ENOTSUP" in r.stderr and "no feed: section" in r.stderr


# ---- Python -------------------------------------------------------------------
@needs_pylib
@pytest.mark.parametrize("mode", ["next", "iter", "batch", "read", "view"])
def test_python_module_reads_and_writes(loom, mode):
    recs = lines_input(loom.tmp)
    spec = loom.spec(f"""
name: feedpy
env: {yaml_env({"PYTHONPATH": ROOT / "python", "LOOM_LIBRARY": LIBLOOM})}
roles:
  worker: {{instances: 2, command: [{PY}, {PYPROBE}, --mode, {mode}]}}
feed: {{input: [data/*.txt], format: lines, epochs: 2, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "3000"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = outputs(loom.tmp / "out")
    assert sorted(got) == sorted(recs * 2)  # two epochs: part-NNNNN-e0 and -e1
    # Loom.phases(): the time blocked on the feed is what the feed counted,
    # no collectives, and the parts add up to the wall time
    ph = [dict(kv.split("=") for kv in line.split("PHASES ", 1)[1].split())
          for line in r.stdout.splitlines() if "PHASES " in line]
    assert len(ph) == 2, r.stdout
    for p in ph:
        v = {k: float(x) for k, x in p.items() if k != "task"}
        assert v["wall"] > 0 and v["comm"] == 0 and v["wait_peers"] == 0, p
        assert abs(v["wait_data"] - v["feed_wait"]) < 0.05 * v["feed_wait"] + 1e-3, p
        assert abs(v["compute"] + v["wait_data"] - v["wall"]) < 1e-3, p
    assert len(list((loom.tmp / "out").glob("part-*-e1"))) == feed_status(loom)["splits"]


@needs_pylib
def test_python_iteration_retry_is_exactly_once(loom):
    """`for rec in feed` reads a batch at a time: a task that dies in the
    middle of a batch (some of its records written out, the split not yet
    past its end) has that split's output dropped and redone by the retry,
    so every record's output is there exactly once."""
    recs = lines_input(loom.tmp, nfiles=6, per=400)
    env = yaml_env({"PYTHONPATH": ROOT / "python", "LOOM_LIBRARY": LIBLOOM})
    spec = loom.spec(f"""
name: feedpyretry
retries: 1
env: {env}
roles:
  worker: {{instances: 2, command: [{PY}, {PYPROBE}, --mode, iter, --sleep-us, "300"]}}
  flaky: {{command: [{PY}, {PYPROBE}, --mode, iter, --sleep-us, "300", --fail-after, "333"]}}
feed: {{input: [data/*.txt], format: lines, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "2000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failing on purpose" in r.stdout + r.stderr
    st = feed_status(loom)
    assert st["committed"] == st["splits"]
    assert_exactly_once(loom.tmp / "out", recs)


def binary_records(rng, n, size=None):
    """n records of random bytes, newlines and empty ones among them, of
    size bytes each or of 0..40."""
    return [bytes(rng.choice(b"\nab\x00\xff") for _ in range(rng.randint(0, 40) if size is None
                                                              else size)) for _ in range(n)]


@needs_pylib
@pytest.mark.parametrize("fmt", ["tfrecord", "fixed", "lines"])
@pytest.mark.parametrize("mode", ["batch", "batch-offsets", "view"])
def test_python_binary_records_come_out_whole(loom, fmt, mode):
    # records of any bytes (newlines, NULs, empty ones), compared byte for
    # byte, through batch() (marshal.loads of libloom's frames, or cut by
    # the offsets) and read_view()
    import random
    rng = random.Random(7)
    d = loom.tmp / "data"
    d.mkdir()
    recs = []
    for i in range(3):
        if fmt == "tfrecord":
            rs = binary_records(rng, 300)
            (d / f"in-{i}").write_bytes(tfrecord(rs))
        elif fmt == "fixed":
            rs = binary_records(rng, 300, 12)
            (d / f"in-{i}").write_bytes(b"".join(rs))
        else:
            rs = [r.replace(b"\n", b"") for r in binary_records(rng, 300)]
            (d / f"in-{i}").write_bytes(b"".join(r + b"\n" for r in rs))
        recs += rs
    fstr = "fixed:12" if fmt == "fixed" else fmt
    args = ["--mode", "batch", "--no-marshal"] if mode == "batch-offsets" else ["--mode", mode]
    spec = loom.spec(f"""
name: feedbin
env: {yaml_env({"PYTHONPATH": ROOT / "python", "LOOM_LIBRARY": LIBLOOM})}
roles:
  worker: {{instances: 2, command: [{PY}, {PYPROBE}, {", ".join(args)}, --hex]}}
feed: {{input: [data/in-*], format: "{fstr}", epochs: 2, output: out/}}
""")
    r = loom.run("run", spec, env={"LOOM_FEED_SPLIT_BYTES": "2000"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert feed_status(loom)["splits"] >= 6
    got = outputs(loom.tmp / "out")
    assert sorted(got) == sorted(r.hex() for r in recs * 2)
    assert len(list((loom.tmp / "out").glob("part-*-e1"))) == feed_status(loom)["splits"]
    oks = re.findall(r"FEEDOK task=\S+ records=(\d+)", r.stdout)
    assert len(oks) == 2 and sum(int(n) for n in oks) == 2 * len(recs)


CUT_CHECK = r"""
import array, marshal, struct, loom
from loom import feed as lf
assert lf._MARSHAL  # this Python reads the frames: batch() takes the marshal path
f = lf.Feed.__new__(lf.Feed)  # no job: the cutting alone
for recs in ([b"abcde", b"", b"x\ny"], [b"s"], [b""] * 3, [bytes(range(256)) * 3] * 2):
    for pre, post in ((0, 0), (4, 1)):
        data, offs = b"", [0]
        for r in recs:
            data += (struct.pack("<I", len(r)) if pre else b"") + r + (b"s" if post else b"")
            offs.append(len(data))
        f._offs = array.array("Q", offs + [0] * 5)  # longer than k + 1, as a reused one is
        got = f._cut(data, len(recs), pre, post)
        assert got == recs and all(type(r) is bytes for r in got), (recs, pre, got)
        if pre:  # what batch() hands marshal
            head = struct.pack("<BiB", 0x5B, len(recs), 0x73)
            assert marshal.loads(memoryview(bytearray(head + data + b"junk"))) == recs
print("CUTOK")
"""


@needs_pylib
def test_python_batch_cuts_every_way():
    # batch()'s two ways to make its list: marshal.loads of the frames
    # libloom wrote, or slices by the offsets
    env = {**os.environ, **pylib_env(), "PYTHONPATH": str(ROOT / "python"),
           "LOOM_LIBRARY": str(LIBLOOM)}
    r = subprocess.run([PY, "-c", CUT_CHECK], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "CUTOK" in r.stdout, r.stdout + r.stderr


@needs_pylib
def test_pytorch_example_trains_and_infers(loom):
    if not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    ex = loom.tmp / "feed-torch"
    shutil.copytree(ROOT / "examples/feed-torch", ex, ignore=shutil.ignore_patterns("data", "out"))
    # the copy's python/ symlink target: point files: loom at this repository's module
    for y in ("job.yaml", "infer.yaml"):
        p = ex / y
        p.write_text(p.read_text().replace("../../python/loom", str(ROOT / "python/loom")))
    r = subprocess.run([PY, str(ex / "prepare.py"), "--limit", "12000"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # (under ASan, loom's own processes here run without leak checking too)
    env = {"LOOM_LIBRARY": str(LIBLOOM), "LOOM_FEED_SPLIT_BYTES": "1000000", **pylib_env()}
    r = loom.run("run", ex / "job.yaml", "--set", "feed.epochs=2", env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"TEST accuracy=([\d.]+)", r.stdout)
    assert m and float(m[1]) > 0.70, r.stdout
    assert (ex / "data/model.pt").exists()
    job = loom.jobs()[0]
    r = loom.run("run", ex / "infer.yaml", env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l.split() for p in sorted((ex / "out").glob("part-*")) for l in
             p.read_text().splitlines()]
    assert len(lines) == 10000  # every test image, once
    acc = sum(a == b for a, b in lines) / len(lines)
    assert abs(acc - float(m[1])) < 1e-9  # the same model, the same predictions
    assert job.exists()
