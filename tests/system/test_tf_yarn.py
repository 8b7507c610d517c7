"""loom.compat.tf_yarn.pytorch: a tf-yarn PyTorch program, written as
tf-yarn's pytorch_example.py is and with its import changed
(tests/system/compat/tf_yarn_pytorch.py), on the one-host YARN cluster,
with Debian's PyTorch, on Fashion-MNIST.

Checked: two workers train in DistributedDataParallel (the same final
weights on both is what DDP guarantees: the checkpoint rank 0 saved to
HDFS each epoch, read back by the client, classifies held-out images well
above chance); Metrics has the job's and each container's time; the loss
reached loom as a metric through tb_writer (no TensorBoard in Debian's
Python); each task's lines reached the caller; a bad argument and a
failing main_fn raise before or after as tf-yarn's RunFailed would."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusters import hadoop_available
from conftest import LIBLOOM, LOOM, ROOT, SANITIZED

PROGRAM = Path(__file__).parent / "compat" / "tf_yarn_pytorch.py"
DATA = Path("/usr/share/datasets/fashion-mnist")

pytestmark = [
    pytest.mark.skipif(not hadoop_available(), reason="java and mvn are not installed "
                       "(scripts/setup.sh installs a JDK and Maven)"),
    pytest.mark.skipif(SANITIZED, reason="PyTorch under the ASan runtime: runs in the normal "
                       "pass (loom.run(fn) on YARN runs under ASan in test_functions)"),
]


def run_py(yloom, args, timeout=400):
    e = dict(yloom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
             LOOM_LIBRARY=str(LIBLOOM))
    return subprocess.run(["/usr/bin/python3", *args], capture_output=True, text=True, env=e,
                          cwd=yloom.tmp, timeout=timeout)


def test_a_tf_yarn_pytorch_program_runs_with_its_import_changed(yloom, yarn, hdfs):
    assert DATA.is_dir(), f"{DATA}: apt-get install dataset-fashion-mnist"
    model_dir = hdfs.url(f"/user/{os.environ.get('USER', 'root')}/tfy-{os.getpid()}")
    r = run_py(yloom, [str(PROGRAM), model_dir])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["latest"] == f"{model_dir}/model_2.pt" and out["epoch"] == 2, out
    assert out["accuracy"] > 0.7, out
    assert sorted(out["container_s"]) == ["worker:0", "worker:1"], out
    assert all(0 < out["train_s"][t] <= out["container_s"][t] < out["total_s"]
               for t in out["train_s"]), out
    # each worker's lines came back prefixed; rank 0 and 1 trained 3 epochs
    for rank in (0, 1):
        assert sum(f"[{rank}] epoch" in l for l in r.stdout.splitlines()) == 3, r.stdout[-3000:]
    assert "[worker:0] Finished Training" in r.stdout and \
        "[worker:1] Finished Training" in r.stdout, r.stdout[-3000:]
    # tb_writer.add_scalar became loom metrics (events.jsonl), each epoch's
    jobs = sorted((yloom.home / "jobs").iterdir())
    assert len(jobs) == 1, jobs
    ev = [json.loads(l) for l in (jobs[0] / "events.jsonl").read_text().splitlines()]
    m = [e for e in ev if e["event"] == "metric" and e.get("tag") == "training_loss"]
    assert len(m) == 6, [e for e in ev if e["event"] == "metric"][:5]
    assert len({e["task"] for e in m}) == 2 and all(e["value"] > 0 for e in m), m


def test_bad_arguments_and_a_failing_main_fn_raise_run_failed(yloom, yarn):
    code = """
import sys
from loom.compat.tf_yarn.pytorch import (DataLoaderArgs, PytorchExperiment, RunFailed,
                                         TaskSpec, run_on_yarn)
import torch

def main_fn(model, loader, device, rank, tb):
    if rank == 1:
        raise ValueError("bad batch in rank 1")

def experiment_fn():
    return PytorchExperiment(model=torch.nn.Linear(2, 2), main_fn=main_fn,
                             train_dataset=torch.utils.data.TensorDataset(torch.zeros(8, 2)),
                             dataloader_args=DataLoaderArgs(batch_size=2))

specs = {"worker": TaskSpec(memory="512 MiB", vcores=1, instances=2)}
try:
    run_on_yarn(experiment_fn, specs, pre_script_hook="echo hi")
except ValueError as e:
    print("REFUSED", e)
try:
    run_on_yarn(experiment_fn, {"learner": TaskSpec(512, 1)})
except ValueError as e:
    print("REFUSED", e)
try:
    run_on_yarn(experiment_fn, specs, env={"PATH": "/usr/bin:/bin"})
except RunFailed as e:
    print("FAILED", repr(str(e)))
"""
    r = run_py(yloom, ["-c", code])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    lines = r.stdout.splitlines()
    refused = [l for l in lines if l.startswith("REFUSED")]
    assert "pre_script_hook: not honoured" in refused[0], refused
    assert "['learner']" in refused[1], refused
    failed = [l for l in lines if l.startswith("FAILED")]
    assert failed and "worker:1" in failed[0] and "ValueError: bad batch in rank 1" in \
        failed[0], lines[-20:]
    # the refusals started nothing: one job only
    assert len(list((yloom.home / "jobs").iterdir())) == 1
