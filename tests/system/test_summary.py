"""System tests of loom/summary.h: TensorBoard event files, decoded here
independently of the writer, the way TensorBoard reads them.

The framing (u64 length, masked CRC-32C of the length, data, masked CRC-32C
of the data) is parsed and every CRC checked with this file's own CRC-32C;
every record's payload goes through `protoc --decode_raw` (Debian's
protobuf-compiler), and the Event fields TensorBoard uses are checked
against the values the writer was given: wall_time = 1, step = 2,
file_version = 3 ("brain.Event:2", first record), summary = 5 -> value = 1
-> tag = 1, simple_value = 2, histo = 5 (min 1, max 2, num 3, sum 4,
sum_squares 5, bucket_limit 6, bucket 7), tensor = 8 (dtype 1 = DT_STRING 7,
string_val 8), metadata = 9 (plugin_data 1 -> plugin_name 1 = "text").
Packed doubles are read with this file's own small protobuf parser (protoc
shows them as opaque strings), and the histogram buckets are recomputed
with TensorFlow's bucketing.

Programs: examples/ckpt-demo/summary-demo (closed-form values) and
examples/fashion-mnist/mlp (loss, accuracy, throughput, weight histograms
and its configuration from rank 0).
"""

import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build")).resolve()
DEMO = BUILD / "examples" / "ckpt-demo" / "summary-demo"
MLP = BUILD / "examples" / "fashion-mnist" / "mlp"
DATA = Path("/usr/share/datasets/fashion-mnist")

# ---- CRC-32C and the record framing, written here from the definitions ----

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(c: int) -> int:
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_own_crc32c_matches_published_vectors():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(bytes(range(32))) == 0x46DD794E


def read_records(path):
    """The payloads of an event file's records, each CRC checked."""
    raw = Path(path).read_bytes()
    out, off = [], 0
    while off < len(raw):
        assert len(raw) - off >= 16, f"{path}: {len(raw) - off} bytes of a record at {off}"
        head = raw[off:off + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", raw[off + 8:off + 12])
        assert hcrc == masked(crc32c(head)), f"{path}: bad length CRC at {off}"
        data = raw[off + 12:off + 12 + n]
        assert len(data) == n, f"{path}: record at {off} truncated"
        (dcrc,) = struct.unpack("<I", raw[off + 12 + n:off + 16 + n])
        assert dcrc == masked(crc32c(data)), f"{path}: bad data CRC at {off}"
        out.append(data)
        off += 16 + n
    return out


# ---- protoc --decode_raw, and a small parser of its text ------------------

def need_protoc():
    if shutil.which("protoc") is None:
        pytest.fail("protoc not found: apt-get install protobuf-compiler "
                    "(scripts/setup.sh installs it)")


def c_unescape(s: str) -> bytes:
    """protoc's C-escaped string (\\n, \\", \\\\, \\NNN octal) to bytes."""
    out, i = bytearray(), 0
    simple = {"n": 10, "r": 13, "t": 9, '"': 34, "'": 39, "\\": 92}
    while i < len(s):
        ch = s[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
            continue
        nxt = s[i + 1]
        if nxt in simple:
            out.append(simple[nxt])
            i += 2
        elif nxt in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
        elif nxt == "x":
            j = i + 2
            while j < len(s) and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(s[i + 2:j], 16))
            i = j
        else:
            raise AssertionError(f"unknown escape in {s!r}")
    return bytes(out)


def decode_raw(payload: bytes):
    """protoc --decode_raw of one message, as a list of (field, value):
    value is a nested list, bytes, ('f32'|'f64', float) or int."""
    p = subprocess.run(["protoc", "--decode_raw"], input=payload,
                       capture_output=True, timeout=30)
    assert p.returncode == 0, f"protoc cannot parse a record: {p.stderr!r}"
    root = []
    stack = [root]
    for line in p.stdout.decode().splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        m = re.match(r"^(\d+) \{$", line)
        if m:
            child = []
            stack[-1].append((int(m.group(1)), child))
            stack.append(child)
            continue
        m = re.match(r"^(\d+): (.*)$", line)
        assert m, f"unexpected protoc line {line!r}"
        field, val = int(m.group(1)), m.group(2)
        if val.startswith('"'):
            v = c_unescape(val[1:-1])
        elif val.startswith("0x") and len(val) == 10:
            v = ("f32", struct.unpack("<f", struct.pack("<I", int(val, 16)))[0])
        elif val.startswith("0x") and len(val) == 18:
            v = ("f64", struct.unpack("<d", struct.pack("<Q", int(val, 16)))[0])
        else:
            v = int(val)
        stack[-1].append((field, v))
    assert len(stack) == 1, "unbalanced protoc output"
    return root


def get(msg, field, default=None):
    """The single value of field in a decoded message."""
    vals = [v for f, v in msg if f == field]
    assert len(vals) <= 1, f"field {field} repeated: {vals}"
    return vals[0] if vals else default


# ---- an independent protobuf wire parser, for packed doubles --------------

def pb_fields(buf: bytes):
    """(field, wire type, value) of each field of a message."""
    out, i = [], 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(buf):
        key = varint()
        field, wt = key >> 3, key & 7
        if wt == 0:
            out.append((field, wt, varint()))
        elif wt == 1:
            out.append((field, wt, buf[i:i + 8]))
            i += 8
        elif wt == 5:
            out.append((field, wt, buf[i:i + 4]))
            i += 4
        elif wt == 2:
            n = varint()
            out.append((field, wt, buf[i:i + n]))
            i += n
        else:
            raise AssertionError(f"wire type {wt}")
    assert i == len(buf)
    return out


def pb_get(buf, *path):
    """The bytes at a path of length-delimited fields (first occurrence)."""
    for field in path:
        buf = next(v for f, wt, v in pb_fields(buf) if f == field and wt == 2)
    return buf


# ---- what the writer was given ----------------------------------------------

TEXT = '# Notes\nloom *summary* demo: \u03bb = 0.1, "quoted" \\ text'.encode()
HIST_N = 1000


def hist_values(s):
    vals = []
    for i in range(HIST_N):
        k = i % 50
        if k == 0:
            v = 0.0
        elif k == 1:
            v = 1e-13
        elif k == 2:
            v = -3e25
        elif k == 3:
            v = math.inf if i == 3 else math.nan
        else:
            v = float(np.float32((i - HIST_N // 2) * (s + 1)) / np.float32(64.0))
        vals.append(float(np.float32(v)))
    return vals


def tf_limits():
    """TensorFlow's default histogram bucket limits (histogram.cc)."""
    pos, v = [], 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(sys.float_info.max)
    return [-x for x in reversed(pos)] + [0.0] + pos


def tf_histogram(values):
    """(limits, counts) as TensorFlow's Histogram encodes them: the bucket
    of v is the first limit above v; runs of empty buckets merge into one
    ending at the run's last limit."""
    import bisect
    limits = tf_limits()
    counts = [0.0] * len(limits)
    for v in values:
        counts[bisect.bisect_right(limits, v)] += 1
    out_l, out_c, i = [], [], 0
    while i < len(limits):
        end, c = limits[i], counts[i]
        i += 1
        if c <= 0:
            while i < len(limits) and counts[i] <= 0:
                end = limits[i]
                i += 1
        out_l.append(end)
        out_c.append(c)
    return out_l, out_c


def packed_doubles(b):
    assert len(b) % 8 == 0
    return list(struct.unpack(f"<{len(b) // 8}d", b))


# ---- decoding a whole file --------------------------------------------------

def as_bytes(shown, raw):
    """A length-delimited field as protoc showed it (a string, or a nested
    message when its bytes happen to parse as one, as "epoch" does) checked
    against the bytes our own parser read; returns the bytes."""
    if isinstance(shown, bytes):
        assert shown == raw, (shown, raw)
    else:
        assert isinstance(shown, list), shown
    return raw


def decode_file(path):
    """[(step, tag, kind, value, raw record)] for every summary value, after
    checking the framing and the version record."""
    need_protoc()
    records = read_records(path)
    assert records, f"{path} is empty"
    first = decode_raw(records[0])
    assert get(first, 3) == b"brain.Event:2", first
    wall = get(first, 1)
    assert wall[0] == "f64" and abs(wall[1] - time.time()) < 3600, wall
    out = []
    for rec in records[1:]:
        ev = decode_raw(rec)
        step = get(ev, 2, 0)
        t = get(ev, 1)
        assert t[0] == "f64" and abs(t[1] - time.time()) < 3600, t
        summary = get(ev, 5)
        assert isinstance(summary, list), ev
        raw_values = [v for f, wt, v in pb_fields(pb_get(rec, 5)) if f == 1]
        assert len(raw_values) == len(summary)
        for (f, value), raw in zip(summary, raw_values):
            assert f == 1, summary
            raw_tag = next(v for f2, wt, v in pb_fields(raw) if f2 == 1)
            tag = as_bytes(get(value, 1), raw_tag).decode()
            if get(value, 2) is not None:
                out.append((step, tag, "scalar", get(value, 2), rec))
            elif get(value, 5) is not None:
                out.append((step, tag, "histo", get(value, 5), rec))
            elif get(value, 8) is not None:
                out.append((step, tag, "tensor", (get(value, 8), get(value, 9), raw), rec))
            else:
                raise AssertionError(f"unknown value {value}")
    return out


def scalars(entries):
    """{tag: {step: float}} of the scalar entries."""
    out = {}
    for step, tag, kind, v, _ in entries:
        if kind == "scalar":
            assert v[0] == "f32", v
            out.setdefault(tag, {})[step] = v[1]
    return out


def event_files(d):
    return sorted(Path(d).glob("events.out.tfevents.*"))


def run_demo(*args, env=None, timeout=60):
    assert DEMO.exists(), f"build first: {DEMO} is missing"
    p = subprocess.run([str(DEMO), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"summary-demo {args}: {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout


def check_demo_file(path, steps):
    entries = decode_file(path)
    sc = scalars(entries)
    assert sorted(sc) == ["loss", "train/accuracy"], sorted(sc)
    assert sc["loss"] == {s: float(np.float32(1.0 / (1 + s))) for s in range(steps)}
    assert sc["train/accuracy"] == {s: float(np.float32(s / 100.0)) for s in range(steps)}

    histos = [(s, v, rec) for s, tag, kind, v, rec in entries if kind == "histo"]
    assert [s for s, _, _ in histos] == list(range(0, steps, 10))
    for s, h, rec in histos:
        vals = [v for v in hist_values(s) if math.isfinite(v)]
        assert len(vals) == HIST_N - HIST_N // 50
        assert get(h, 1) == ("f64", min(vals))
        assert get(h, 2) == ("f64", max(vals))
        assert get(h, 3) == ("f64", float(len(vals)))
        total = sq = 0.0
        for v in vals:  # the writer's order, so the same rounding
            total += v
            sq += v * v
        assert get(h, 4) == ("f64", total)
        assert get(h, 5) == ("f64", sq)
        # Packed buckets, read with our own parser from the raw record:
        # Event.summary(5) -> Summary.value(1) -> Value.histo(5)
        hb = pb_get(rec, 5, 1, 5)
        fields = {f: v for f, wt, v in pb_fields(hb) if f in (6, 7)}
        limits, counts = packed_doubles(fields[6]), packed_doubles(fields[7])
        want_l, want_c = tf_histogram(vals)
        assert limits == want_l
        assert counts == want_c
        assert sum(counts) == len(vals)
        # where protoc printed them as strings, they agree
        for f, want in ((6, fields[6]), (7, fields[7])):
            shown = get(h, f)
            if isinstance(shown, bytes):
                assert shown == want

    texts = [(s, tag, v) for s, tag, kind, v, _ in entries if kind == "tensor"]
    assert len(texts) == 1, texts
    s, tag, (tensor, meta, raw) = texts[0]
    assert (s, tag) == (0, "notes")
    assert get(tensor, 1) == 7  # DT_STRING
    assert as_bytes(get(tensor, 8), pb_get(raw, 8, 8)) == TEXT
    assert as_bytes(get(get(meta, 1), 1), pb_get(raw, 9, 1, 1)) == b"text"
    return entries


def test_demo_file_decodes_as_tensorboard_reads_it(tmp_path):
    out = run_demo(tmp_path / "run", "--steps", 20)
    path = Path(out.splitlines()[0])
    assert path.parent == tmp_path / "run"
    assert [path] == event_files(tmp_path / "run")
    m = re.fullmatch(r"events\.out\.tfevents\.(\d+)\.(.+)", path.name)
    assert m, path.name
    assert abs(int(m.group(1)) - time.time()) < 3600
    assert m.group(2).startswith(socket.gethostname())
    entries = check_demo_file(path, 20)
    assert len(entries) == 20 * 2 + 2 + 1


def test_periodic_flush_without_close(tmp_path):
    """Records reach the file within the flush period (2 s) while the writer
    is still open and nobody calls flush."""
    p = subprocess.Popen([str(DEMO), str(tmp_path), "--steps", "3", "--hold", "3"],
                         stdout=subprocess.PIPE, text=True)
    try:
        path = Path(p.stdout.readline().strip())
        assert p.stdout.readline().strip() == "written"
        time.sleep(2.5)
        assert p.poll() is None, "the writer exited before the check"
        assert len(read_records(path)) == 1 + 3 * 2 + 1 + 1
    finally:
        p.wait(timeout=30)
    assert p.returncode == 0
    assert len(read_records(path)) == 9


def test_default_directory_is_the_tasks_run(loom):
    """Inside a job, no directory: $LOOM_JOB_DIR/tensorboard/<role>-<index>."""
    spec = loom.spec(
        "name: summaries\n"
        "roles:\n"
        f"  chief: {{command: [{json.dumps(str(DEMO))}, '-', --steps, '11']}}\n"
        f"  worker: {{instances: 2, command: [{json.dumps(str(DEMO))}, '-', --steps, '11']}}\n")
    p = loom.run("run", spec, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    tb = loom.job_dir() / "tensorboard"
    assert sorted(x.name for x in tb.iterdir()) == ["chief-0", "worker-0", "worker-1"]
    for run in tb.iterdir():
        files = event_files(run)
        assert len(files) == 1, files
        check_demo_file(files[0], 11)


def test_outside_a_job_without_directory_is_a_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    p = subprocess.run([str(DEMO), "-"], capture_output=True, text=True, env=env,
                       timeout=30)
    assert p.returncode == 1
    assert "not running inside a loom job" in p.stderr, p.stderr


# ---- the fashion-mnist example --------------------------------------------

EPOCH_RE = re.compile(
    r"epoch (\d+): steps (\d+), train loss ([\d.]+), train accuracy ([\d.]+), "
    r"test loss ([\d.]+), test accuracy ([\d.]+), [\d.]+ s, (\d+) samples/s")


def need_mlp():
    if not MLP.exists():
        pytest.fail(f"build first: {MLP} is missing")
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")


def check_mlp_scalars(run_dir, output, epochs, steps_per_epoch, batch, world, hidden=(256, 128)):
    """The demo's summaries against its own printed figures: per epoch
    scalars and weight histograms, per step loss and accuracy (whose mean
    over an epoch is that epoch's), and the configuration text."""
    files = event_files(run_dir)
    assert len(files) == 1, files
    entries = decode_file(files[0])
    sc = scalars(entries)
    lines = EPOCH_RE.findall(output)
    assert len(lines) == epochs, output
    tags = ["train/loss", "train/accuracy", "test/loss", "test/accuracy",
            "throughput/samples_per_s", "epoch"]
    per_step = ["train/step_loss", "train/step_accuracy"]
    assert sorted(sc) == sorted(tags + per_step), sorted(sc)
    n = epochs * steps_per_epoch
    for tag in per_step:
        assert sorted(sc[tag]) == list(range(1, n + 1)), (tag, sorted(sc[tag]))
    for s in range(1, n + 1):
        assert abs(sc["train/step_accuracy"][s] * batch - round(sc["train/step_accuracy"][s] * batch)) < 1e-3
        assert 0 < sc["train/step_loss"][s] < 10
    for e in range(epochs):
        steps = range(e * steps_per_epoch + 1, (e + 1) * steps_per_epoch + 1)
        end = (e + 1) * steps_per_epoch
        for tag, whole in (("train/step_loss", "train/loss"), ("train/step_accuracy", "train/accuracy")):
            mean = sum(sc[tag][s] for s in steps) / steps_per_epoch
            assert abs(mean - sc[whole][end]) < 1e-5, (tag, e, mean, sc[whole][end])
    sizes = {"weights/w1": hidden[0] * 784, "weights/w2": hidden[1] * hidden[0],
             "weights/w3": 10 * hidden[1]}
    histos = {}
    for step, tag, kind, h, _ in entries:
        if kind == "histo":
            histos.setdefault(tag, {})[step] = h
    assert sorted(histos) == sorted(sizes), sorted(histos)
    for tag, by_step in histos.items():
        assert sorted(by_step) == [e * steps_per_epoch for e in range(1, epochs + 1)], tag
        for h in by_step.values():
            assert get(h, 3) == ("f64", float(sizes[tag]))  # every weight counted
            assert -3 < get(h, 1)[1] < 0 < get(h, 2)[1] < 3
    texts = [(s, tag, v) for s, tag, kind, v, _ in entries if kind == "tensor"]
    assert [(s, tag) for s, tag, _ in texts] == [(0, "config")], texts
    text = pb_get(texts[0][2][2], 8, 8).decode()
    assert f"| processes | {world} |" in text and f"| global batch | {batch} |" in text, text
    for ep, steps, tl, ta, vl, va, rate in lines:
        step = int(ep) * steps_per_epoch
        assert int(steps) == steps_per_epoch
        for tag, shown in (("train/loss", tl), ("train/accuracy", ta),
                           ("test/loss", vl), ("test/accuracy", va)):
            assert abs(sc[tag][step] - float(shown)) <= 6e-5, (tag, step, sc[tag], shown)
        assert abs(sc["throughput/samples_per_s"][step] - float(rate)) <= 0.5 + 1e-6 * float(rate)
        assert sc["epoch"][step] == float(ep)
    for tag in tags:
        assert sorted(sc[tag]) == [e * steps_per_epoch for e in range(1, epochs + 1)]


def test_mlp_job_writes_scalars_from_rank_0(loom, tmp_path):
    need_mlp()
    args = ["--epochs", "2", "--limit", "2048", "--batch", "256"]
    spec = loom.spec(
        "name: mlp-summaries\n"
        "env: {OMP_NUM_THREADS: \"1\", OPENBLAS_NUM_THREADS: \"1\"}\n"
        "roles:\n"
        f"  chief: {{command: {json.dumps([str(MLP), *args])}}}\n"
        f"  worker: {{command: {json.dumps([str(MLP), *args])}}}\n")
    p = loom.run("run", spec, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    tb = loom.job_dir() / "tensorboard"
    assert sorted(x.name for x in tb.iterdir()) == ["chief-0"], "only rank 0 writes"
    check_mlp_scalars(tb / "chief-0", out, 2, 8, 256, 2)


def test_mlp_summary_flag_outside_a_job(tmp_path):
    need_mlp()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    p = subprocess.run([str(MLP), "--epochs", "2", "--limit", "1000", "--batch", "250",
                        "--summary", str(tmp_path / "tb")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    check_mlp_scalars(tmp_path / "tb", p.stdout, 2, 4, 250, 1)
