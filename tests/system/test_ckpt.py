"""System tests of loom/ckpt.h: checkpoints survive their saver being killed
at any moment, damaged files are refused, and the fashion-mnist example
resumes from its checkpoints, exactly and inside a job that retries.

1. A saver (examples/ckpt-demo: every value a closed-form function of the
   step) is SIGKILLed at random moments, over and over; after each kill the
   newest valid checkpoint restores completely with the right values, and it
   is never older than the last save the saver reported done.
2. Truncated and bit-flipped files are refused with a clear error, and
   `latest` falls back to the previous checkpoint.
3. mlp resumed from an earlier epoch ends with exactly (bit for bit) the
   parameters of the uninterrupted run.
4. A job whose worker is killed mid-way restarts (retries: 1), resumes from
   the chief's last checkpoint (log line) and still reaches the accuracy.
"""

import json
import os
import random
import re
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import loom_pids_of

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build")).resolve()
DEMO = BUILD / "examples" / "ckpt-demo" / "ckpt-demo"
MLP = BUILD / "examples" / "fashion-mnist" / "mlp"
DATA = Path("/usr/share/datasets/fashion-mnist")
ACCURACY_TARGET = 0.88


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k not in ("RANK", "WORLD_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def demo(*args, check=True):
    assert DEMO.exists(), f"build first: {DEMO} is missing"
    p = subprocess.run([str(DEMO), *map(str, args)], capture_output=True, text=True,
                       timeout=60, env=clean_env())
    if check:
        assert p.returncode == 0, f"ckpt-demo {args}: {p.returncode}\n{p.stdout}{p.stderr}"
    return p


def ckpt_name(step):
    return f"ckpt-{step:012d}.ckpt"


def temp_files(d):
    return [p.name for p in Path(d).iterdir() if p.name.startswith(".ckpt-")]


def test_kill_the_saver_at_random_moments(tmp_path):
    """About 150 kills in at most ~40 s: at start-up, mid-write, mid-fsync,
    between the rename and the pruning, between saves."""
    d = tmp_path / "ck"
    rng = random.Random(1234)
    last_ok = -1
    kills = with_temp = 0
    deadline = time.time() + 40
    while kills < 150 and time.time() < deadline:
        saver = subprocess.Popen([str(DEMO), "save", str(d), "--keep", "3", "--kib", "768"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=clean_env())
        time.sleep(rng.uniform(0, 0.05))
        saver.send_signal(signal.SIGKILL)
        out, err = saver.communicate(timeout=30)
        assert saver.returncode == -signal.SIGKILL, (saver.returncode, err)
        kills += 1
        saved = [int(x.split()[1]) for x in out.splitlines() if x.startswith("saved ")]
        if d.exists() and temp_files(d):
            with_temp += 1
        p = demo("check", d, "--kib", 768)
        line = p.stdout.strip()
        if line == "none":
            assert last_ok < 0 and not saved, (line, saved, last_ok)
            continue
        m = re.fullmatch(r"ok (\d+)", line)
        assert m, p.stdout + p.stderr
        step = int(m.group(1))
        # never older than what the saver said it had saved, nor than before
        assert step >= last_ok, (step, last_ok)
        if saved:
            assert saved[-1] <= step <= saved[-1] + 1, (saved[-1], step)
        last_ok = step
        # the checker's open removed the dead saver's temporary file
        assert temp_files(d) == [], temp_files(d)
        # and every checkpoint present is whole
        for f in sorted(d.glob("ckpt-*.ckpt")):
            demo("restore", d, int(f.name[5:17]), "--kib", 768)
    print(f"{kills} kills, {with_temp} left a temporary file, reached step {last_ok}")
    assert kills >= 30
    assert last_ok > 10, "the saver hardly ever completed a save"
    assert with_temp > 0, "no kill landed during a save"


def test_damaged_files_are_refused_and_skipped(tmp_path):
    d = tmp_path / "ck"
    demo("save", d, "--count", "3", "--keep", "0", "--kib", "64")
    newest = d / ckpt_name(2)
    good = newest.read_bytes()
    rng = random.Random(99)
    cases = [("truncated", good[:n]) for n in (0, 10, 63, 64, 100, len(good) // 2, len(good) - 1)]
    for _ in range(20):
        bit = rng.randrange(len(good) * 8)
        bad = bytearray(good)
        bad[bit // 8] ^= 1 << (bit % 8)
        cases.append((f"bit {bit} flipped", bytes(bad)))
    cases.append(("appended", good + b"\0"))
    for what, content in cases:
        newest.write_bytes(content)
        p = demo("restore", d, 2, "--kib", 64, check=False)
        assert p.returncode == 1, f"{what}: restore succeeded"
        err = p.stderr
        assert "ckpt-000000000002.ckpt" in err, err
        assert re.search(r"is truncated|is corrupt|is not a loom checkpoint|format version", err), (what, err)
        if what.startswith("truncated") and len(content) >= 72:
            assert "is truncated:" in err, err
        # latest skips it, says so, and the previous one is whole
        p = demo("check", d, "--kib", 64)
        assert p.stdout.strip() == "ok 1", (what, p.stdout)
        assert "skipping checkpoint" in p.stderr and "ckpt-000000000002" in p.stderr, p.stderr
    newest.write_bytes(good)
    assert demo("check", d, "--kib", 64).stdout.strip() == "ok 2"
    # a checkpoint restored as the wrong step: clear shape error
    (d / ckpt_name(7)).write_bytes(good)
    p = demo("restore", d, 7, "--kib", 64, check=False)
    assert p.returncode == 1 and "holds step 2, its name says 7" in p.stderr, p.stderr


# ---- the fashion-mnist example ---------------------------------------------

def need_mlp():
    if not MLP.exists():
        pytest.fail(f"build first: {MLP} is missing")
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")


def run_mlp(args, timeout=300):
    p = subprocess.run([str(MLP), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=clean_env())
    assert p.returncode == 0, f"mlp {args}: {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}"
    return p


def test_mlp_resumes_exactly(tmp_path):
    """Run 6 epochs with checkpoints; then pretend the run died after epoch 4
    (epoch 5's checkpoint gone, epoch 6's truncated): the rerun resumes at
    epoch 4 and ends with the same parameters, bit for bit."""
    need_mlp()
    d = tmp_path / "ck"
    args = ["--epochs", "6", "--limit", "3000", "--batch", "200", "--ckpt", d, "--json"]
    first = run_mlp([*args, "--save", tmp_path / "a.bin"])
    assert "resuming" not in first.stdout
    spe = 3000 // 200
    assert sorted(p.name for p in d.glob("ckpt-*")) == [ckpt_name(spe * e) for e in (4, 5, 6)]
    (d / ckpt_name(spe * 5)).unlink()
    six = d / ckpt_name(spe * 6)
    six.write_bytes(six.read_bytes()[:-100])
    second = run_mlp([*args, "--save", tmp_path / "b.bin"])
    assert f"resuming from the checkpoint of step {spe * 4} (epoch 4)" in second.stdout, second.stdout
    assert "skipping checkpoint" in second.stderr and "is truncated" in second.stderr
    epochs = re.findall(r"^epoch (\d+):", second.stdout, re.M)
    assert epochs == ["5", "6"], second.stdout
    a, b = (tmp_path / "a.bin").read_bytes(), (tmp_path / "b.bin").read_bytes()
    assert len(a) == len(b) and a == b, "the resumed run's parameters differ"
    ja = json.loads(first.stdout.strip().splitlines()[-1])
    jb = json.loads(second.stdout.strip().splitlines()[-1])
    assert ja["test_accuracy"] == jb["test_accuracy"] and ja["steps"] == jb["steps"] == 6 * spe
    # checkpoints of another configuration are refused, clearly
    p = subprocess.run([str(MLP), *map(str, args[:-1]), "--seed", "2"], capture_output=True,
                       text=True, timeout=120, env=clean_env())
    assert p.returncode == 1 and "use the same options or another --ckpt" in p.stderr, p.stderr
    p = subprocess.run([str(MLP), *map(str, args[:-1]), "--hidden", "64"], capture_output=True,
                       text=True, timeout=120, env=clean_env())
    assert p.returncode == 1, p.stdout
    assert "tensor 'w1' in checkpoint" in p.stderr and "f32 [256, 784]; the caller expects f32 [64, 784]" in p.stderr, p.stderr


def task_pids(home, task, needle):
    """Pids of this LOOM_HOME's processes of task whose command line has
    needle."""
    out = []
    for pid in loom_pids_of(home):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"LOOM_TASK={task}".encode() in env and needle.encode() in cmd:
            out.append(pid)
    return out


def test_job_killed_midway_resumes_from_checkpoint(loom, tmp_path):
    """chief + worker for 6 epochs, retries: 1. Once the chief checkpointed
    epoch 2 the worker is SIGKILLed; the attempt fails, the job restarts,
    every rank resumes from the newest checkpoint and training still
    reaches the accuracy target."""
    need_mlp()
    cmd = json.dumps([str(MLP), "--epochs", "6", "--json"])
    spec = loom.spec(
        "name: resume\n"
        "retries: 1\n"
        "env: {OMP_NUM_THREADS: \"1\", OPENBLAS_NUM_THREADS: \"1\"}\n"
        f"roles:\n  chief: {{command: {cmd}}}\n  worker: {{command: {cmd}}}\n")
    job = loom.popen("run", spec)
    try:
        ck = loom.wait_for(lambda: loom.jobs() and loom.jobs()[0] / "ckpt", 30, "the job dir")
        loom.wait_for(lambda: (ck / ckpt_name(2 * 235)).exists(), 120,
                      "the checkpoint of epoch 2")
        pids = task_pids(loom.home, "worker:0", "mlp")
        assert pids, "the worker's mlp is not running"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        out, err = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    log = out + err
    assert job.returncode == 0, log[-4000:]
    m = re.search(r"resuming from the checkpoint of step (\d+) \(epoch (\d+)\)", log)
    assert m, log[-4000:]
    step, epoch = int(m.group(1)), int(m.group(2))
    assert 2 <= epoch < 6 and step == epoch * 235, (step, epoch)
    st = loom.state()
    by = {t["task"]: t for t in st["tasks"]}
    assert by["chief:0"]["attempt"] == 1, by
    # the retry trained only the epochs after the checkpoint
    tail = log[m.end():]
    assert re.findall(r"epoch (\d+): steps", tail) == [str(e) for e in range(epoch + 1, 7)], tail
    res = json.loads(tail[tail.index('{"test_accuracy"'):].splitlines()[0])
    assert res["steps"] == 6 * 235 and res["world_size"] == 2, res
    assert res["test_accuracy"] >= ACCURACY_TARGET, res
