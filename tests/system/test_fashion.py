"""System tests of examples/fashion-mnist: the data-parallel MLP trained with
libloom's collectives under `loom run`, checked the way a user would check
it: by the parameters it saves and the accuracy it reports.

1. Equivalence: N processes of a synchronous job (N = 2, 4) end with the
   same parameters as one process trained on the same global batches, up
   to the order of floating-point sums.
2. Accuracy: full training reaches the published MLP baseline (0.883).

Needs the build: cmake -S . -B build && cmake --build build (or
LOOM_BUILD_DIR pointing at another build directory). Run with
/usr/bin/python3 -m pytest tests/system/test_fashion.py.
"""

import gzip
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build")).resolve()
MLP = BUILD / "examples" / "fashion-mnist" / "mlp"
EXAMPLE_SPEC = ROOT / "examples" / "fashion-mnist" / "job.yaml"
DATA = Path("/usr/share/datasets/fashion-mnist")

# The equivalence runs: a global batch of 254 splits unevenly over 4
# processes (63, 64, 63, 64), and 2000 training examples make each epoch 7
# full batches and one of 222 (55/56 rows a process), so 40 steps cross
# four epoch boundaries. The learning rate is low enough that rounding
# differences stay rounding differences: at 0.1 a ReLU unit sitting at 0 for
# some example eventually flips on one side and not the other, and from then
# on the runs drift apart the way any chaotic system does.
EQ_ARGS = ["--batch", "254", "--limit", "2000", "--lr", "0.02",
           "--hidden", "256,128", "--seed", "7"]
EQ_STEPS = 40
# Allowed difference, relative to the largest change training made to any
# parameter. Observed: 2.7e-7 (N = 2 and 4). A wrong slice, a missing or
# doubled gradient, or a wrong loss weight gives differences of order 1.
EQ_RTOL = 1e-4

ACCURACY_TARGET = 0.88


def clean_env(**extra):
    """The environment of a process outside any loom job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k not in (
               "TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "RANK",
               "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def need(path, what):
    if not path.exists():
        pytest.fail(f"{what} not found at {path}: build first "
                    f"(cmake -S {ROOT} -B {BUILD} && cmake --build {BUILD}) "
                    f"or set LOOM_BUILD_DIR")


@pytest.fixture(scope="module", autouse=True)
def binaries():
    need(MLP, "the mlp example")
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        pytest.skip(f"Fashion-MNIST not installed in {DATA} "
                    "(apt-get install dataset-fashion-mnist)")


def load_params(path):
    """Reads mlp's --save file: 'LOOMMLP1', 4 x u32 layer sizes, u64 count,
    then that many float32, all little-endian."""
    raw = Path(path).read_bytes()
    assert raw[:8] == b"LOOMMLP1", f"{path}: bad magic {raw[:8]!r}"
    sizes = struct.unpack_from("<4I", raw, 8)
    (count,) = struct.unpack_from("<Q", raw, 24)
    i0, h1, h2, out = sizes
    assert count == h1 * i0 + h1 + h2 * h1 + h2 + out * h2 + out, sizes
    assert len(raw) == 32 + 4 * count, f"{path}: {len(raw)} bytes for {count}"
    return sizes, np.frombuffer(raw, "<f4", count, 32).astype(np.float64)


def last_json(text):
    lines = [ln for ln in text.splitlines() if '{"test_accuracy"' in ln]
    assert lines, f"no JSON result line in the output:\n{text[-3000:]}"
    line = lines[-1]
    return json.loads(line[line.index("{"):])


def run_single(args, timeout=300):
    p = subprocess.run([str(MLP), *args], env=clean_env(), capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, (f"mlp {' '.join(args)} exited {p.returncode}\n"
                               f"stdout:\n{p.stdout[-3000:]}\nstderr:\n"
                               f"{p.stderr[-3000:]}")
    return p.stdout


def yaml_list(items):
    return "[" + ", ".join(json.dumps(str(x)) for x in items) + "]"


def run_job(loom, spec, timeout=300):
    """`loom run spec` through conftest's loom fixture (its own LOOM_HOME,
    and a check that nothing outlives the test); returns the output."""
    p = loom.run("run", spec, timeout=timeout,
                 env={"OPENBLAS_NUM_THREADS": "1"})
    out = p.stdout + p.stderr
    assert p.returncode == 0, (f"loom run {spec} exited {p.returncode}\n"
                               f"{out[-4000:]}")
    return out


def spec_text(name, nprocs, command):
    worker = ""
    if nprocs > 1:
        worker = (f"  worker:\n    instances: {nprocs - 1}\n"
                  f"    command: {yaml_list(command)}\n")
    return (
        f"name: {name}\n"
        "env: {OMP_NUM_THREADS: \"1\", OPENBLAS_NUM_THREADS: \"1\"}\n"
        "roles:\n"
        "  chief:\n    instances: 1\n"
        f"    command: {yaml_list(command)}\n" + worker)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process: the initial parameters and those after EQ_STEPS."""
    d = tmp_path_factory.mktemp("single")
    run_single([*EQ_ARGS, "--max-steps", "0", "--save", str(d / "init.bin")])
    out = run_single([*EQ_ARGS, "--max-steps", str(EQ_STEPS), "--json",
                      "--save", str(d / "final.bin")])
    res = last_json(out)
    assert res["world_size"] == 1 and res["steps"] == EQ_STEPS, res
    return load_params(d / "init.bin")[1], load_params(d / "final.bin")


@pytest.mark.parametrize("nprocs", [2, 4])
def test_data_parallel_matches_single_process(loom, tmp_path, reference,
                                              nprocs):
    init, (sizes, single) = reference
    save = tmp_path / "params.bin"
    spec = loom.spec(spec_text(f"fashion-eq-{nprocs}", nprocs,
                               [MLP, *EQ_ARGS, "--max-steps", EQ_STEPS,
                                "--json", "--save", save]))
    out = run_job(loom, spec)
    res = last_json(out)
    assert res["world_size"] == nprocs, res
    assert res["steps"] == EQ_STEPS, res
    assert "parameters differ across ranks" not in out, out[-3000:]

    got_sizes, params = load_params(save)
    assert got_sizes == sizes
    moved = np.abs(single - init).max()
    assert moved > 0.01, "training did not move the parameters"
    diff = np.abs(params - single)
    worst = int(diff.argmax())
    print(f"N={nprocs}: max |diff| {diff.max():.3g} at {worst}, "
          f"largest update {moved:.3g}, ratio {diff.max() / moved:.3g}")
    assert diff.max() <= EQ_RTOL * moved, (
        f"{nprocs} processes differ from 1 by {diff.max():.3g} at parameter "
        f"{worst} ({params[worst]!r} vs {single[worst]!r}); allowed "
        f"{EQ_RTOL} x largest update {moved:.3g}")


def test_accuracy_single_process_full_training(tmp_path):
    """Slow (about 15 s on 2 cores): the default 10 epochs, one process."""
    out = run_single(["--json", "--save", str(tmp_path / "p.bin")], timeout=600)
    res = last_json(out)
    print(out)
    assert res["world_size"] == 1 and res["steps"] == 2350, res
    assert res["test_accuracy"] >= ACCURACY_TARGET, res
    load_params(tmp_path / "p.bin")


def test_example_job_reaches_accuracy(loom, tmp_path):
    """Slow (about 30 s on 2 cores): examples/fashion-mnist/job.yaml as
    shipped, 1 chief + 3 workers for 10 epochs."""
    spec = EXAMPLE_SPEC
    if BUILD != (ROOT / "build").resolve():
        # the same spec, taking mlp from LOOM_BUILD_DIR instead of build/
        text = EXAMPLE_SPEC.read_text()
        shipped = "../../build/examples/fashion-mnist/mlp"
        assert shipped in text, f"{EXAMPLE_SPEC} no longer names {shipped}"
        spec = loom.spec(text.replace(shipped, str(MLP)))
    out = run_job(loom, spec, timeout=600)
    res = last_json(out)
    assert res["world_size"] == 4, res
    assert res["test_accuracy"] >= ACCURACY_TARGET, res
    saved = loom.job_dir() / "tasks" / "chief-0" / "mlp.params"
    assert saved.exists(), f"no mlp.params in the chief's directory {saved}"
    load_params(saved)


def test_bad_data_dir_is_a_clear_error(tmp_path):
    p = subprocess.run([str(MLP), "--data", str(tmp_path / "nowhere")],
                       env=clean_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0
    assert "nowhere/train-images-idx3-ubyte.gz" in p.stderr, p.stderr
    assert "cannot open" in p.stderr, p.stderr


def test_corrupt_idx_is_a_clear_error(tmp_path):
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    # labels where images belong: wrong magic
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(
        (DATA / "train-labels-idx1-ubyte.gz").read_bytes())
    p = subprocess.run([str(MLP), "--data", str(tmp_path)], env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "magic number is 0x00000801, expected 0x00000803" in p.stderr, \
        p.stderr
    # a truncated label file
    raw = gzip.decompress((DATA / "t10k-labels-idx1-ubyte.gz").read_bytes())
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(
        (DATA / "train-images-idx3-ubyte.gz").read_bytes())
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(raw[:-10]))
    p = subprocess.run([str(MLP), "--data", str(tmp_path)], env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "t10k-labels-idx1-ubyte.gz: file is truncated" in p.stderr, p.stderr
