"""examples/tf-mwms under loom: a Keras model trained with TensorFlow's
MultiWorkerMirroredStrategy by a chief and 2 workers, its input from loom's
feed. Checks what each task reports (every replica sees 3 replicas in sync;
a collective sum of distinct per-replica values is exact; the feed's shares
add up to the training set; the replicas' weights agree; TF_CONFIG names the
ports loom reserved), the test accuracy against the same script in one
process on the same global batch and steps (within 1 point), the
checkpoints TensorFlow wrote, and the chief's TensorBoard scalars, decoded
with TensorFlow."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LIBLOOM, ROOT, pylib_env

EXAMPLE = ROOT / "examples/tf-mwms"
DATASET = Path("/usr/share/datasets/fashion-mnist")
TASKS = ("chief-0", "worker-0", "worker-1")
STEPS, BATCH, REPLICAS = 800, 192, 3  # train.py's defaults, which job.yaml keeps
TRAIN_RECORDS, SPLITS = 60000, 30  # prepare.py: 60,000 records in 30 files

# Reads the chief's event files and the last checkpoint with TensorFlow,
# printing one JSON line: {tag: [[step, value], ...]} and {variable: shape}.
DECODE = r"""
import glob, json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
scalars = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "events.out.tfevents.*"))):
    for ev in tf.compat.v1.train.summary_iterator(path):
        for v in ev.summary.value:
            x = v.simple_value if v.HasField("simple_value") else float(tf.make_ndarray(v.tensor))
            scalars.setdefault(v.tag, []).append([ev.step, x])
r = tf.train.load_checkpoint(sys.argv[2])
shapes = {k: s for k, s in r.get_variable_to_shape_map().items()}
print("DECODED " + json.dumps({"scalars": scalars, "shapes": shapes}))
"""


def task_env():
    """The environment of a process outside any loom job."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_") and k != "TF_CONFIG"}
    return dict(e, **pylib_env())


@pytest.fixture
def example(loom, tf_python):
    """The example copied into the test's directory, its records prepared
    and the spec pointed at this repository's module and the TF interpreter."""
    if not (DATASET / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("dataset-fashion-mnist is not installed")
    ex = loom.tmp / "tf-mwms"
    ex.mkdir()
    for f in ("train.py", "prepare.py", "job.yaml"):
        shutil.copy(EXAMPLE / f, ex / f)
    r = subprocess.run([sys.executable, str(ex / "prepare.py"), "--out", str(ex / "data")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(list((ex / "data").glob("train-*.idx"))) == SPLITS
    spec = (ex / "job.yaml").read_text()
    spec = spec.replace("../../python/loom", str(ROOT / "python/loom"))
    spec, n = re.subn(r"\n  venv: .*", "", spec)  # the interpreter by its own path instead
    assert n == 1
    spec, n = re.subn(r"venv/bin/python ", f"{tf_python} ", spec)
    assert n == 2
    (ex / "job.yaml").write_text(spec)
    return ex


def test_mwms_chief_and_two_workers(loom, tf_python, example):
    ex = example
    # The one-process reference: the same script, no loom, no TF_CONFIG, the
    # same global batch and steps; it runs while the job does.
    ref_dir = loom.tmp / "ref"
    ref_dir.mkdir()
    ref = subprocess.Popen([str(tf_python), str(ex / "train.py"), "--data", str(ex / "data"),
                            "--tb-dir", "", "--result", str(ref_dir / "result.json")],
                           cwd=ref_dir, env=task_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        r = loom.run("run", ex / "job.yaml", env={"LOOM_LIBRARY": str(LIBLOOM), **pylib_env()},
                     timeout=400)
        ref_out, _ = ref.communicate(timeout=300)
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    assert ref.returncode == 0, ref_out[-5000:]

    job = loom.job_dir()
    state = loom.state()
    assert sorted((t["task"], t["state"], t["exit_code"]) for t in state["tasks"]) == [
        ("chief:0", "succeeded", 0), ("worker:0", "succeeded", 0), ("worker:1", "succeeded", 0)]
    feed = state["feed"]  # every split read once, by someone
    assert (feed["splits"], feed["done"], feed["records"], feed["finished"]) == \
        (SPLITS, SPLITS, TRAIN_RECORDS, True), feed
    addr = {t["task"]: f"{t['host']}:{t['port']}" for t in state["tasks"]}

    res = {t: json.loads((job / "tasks" / t / "result.json").read_text()) for t in TASKS}
    # the sum over R replicas of v_r[j] = 1000 (r + 1) + j, in closed form
    n = res["chief-0"]["sum_check"]["n"]
    want_total = 1000 * n * REPLICAS * (REPLICAS + 1) // 2 + REPLICAS * n * (n - 1) // 2
    for t, x in res.items():
        role, index = t.split("-")
        # TF_CONFIG as loom set it: the reserved ports, this task
        assert x["tf_config"] == {"cluster": {"chief": [addr["chief:0"]],
                                              "worker": [addr["worker:0"], addr["worker:1"]]},
                                  "task": {"type": role, "index": int(index)}}, (t, x)
        assert x["num_replicas_in_sync"] == REPLICAS, (t, x)
        assert x["replicas_saw"] == [[r, REPLICAS] for r in range(REPLICAS)], (t, x)
        s = x["sum_check"]
        assert (s["got_first"], s["got_last"], s["got_total"], s["max_abs_err"], s["exact"]) == \
            (1000 * REPLICAS * (REPLICAS + 1) / 2,
             1000 * REPLICAS * (REPLICAS + 1) / 2 + REPLICAS * (n - 1), want_total, 0.0, True), \
            (t, s)
        assert (x["steps"], x["global_batch"], x["per_replica_batch"]) == \
            (STEPS, BATCH, BATCH // REPLICAS), (t, x)
        # each task's share of the feed, as every task gathered them
        assert x["shares"] == res["chief-0"]["shares"], (t, x["shares"])
        assert x["records"] == x["shares"][x["replica_id"]] > 0, (t, x)
        # the replicas' copies of the weights are the same
        assert len(set(x["weights_checksums"])) == 1, (t, x["weights_checksums"])
    assert sorted(x["replica_id"] for x in res.values()) == list(range(REPLICAS))
    assert sum(res["chief-0"]["shares"]) == TRAIN_RECORDS
    assert len({x["weights_checksums"][0] for x in res.values()}) == 1
    assert len({x["final_loss"] for x in res.values()}) == 1

    one = json.loads((ref_dir / "result.json").read_text())
    assert (one["num_replicas_in_sync"], one["steps"], one["global_batch"],
            one["per_replica_batch"], one["records"]) == (1, STEPS, BATCH, BATCH, TRAIN_RECORDS)
    assert one["sum_check"]["exact"] and one["sum_check"]["got_first"] == 1000.0
    acc, acc1 = res["chief-0"]["test_accuracy"], one["test_accuracy"]
    took = re.search(r"succeeded in ([\d.]+s)", r.stdout + r.stderr)
    print(f"test accuracy: loom 3 processes {acc:.4f}, one process {acc1:.4f}; the job "
          f"{took[1] if took else '?'}, training {res['chief-0']['train_s']:.1f}s")
    assert res["chief-0"]["test_examples"] == 10000
    assert acc > 0.84 and acc1 > 0.84, (acc, acc1)  # it learned
    assert abs(acc - acc1) <= 0.01, (acc, acc1)
    # the loss and the test accuracy reached loom's dashboard (Loom.metric)
    dash = {}
    for e in loom.events():
        if e["event"] == "metric" and e.get("source") == "user":
            dash.setdefault((e["task"], e["tag"]), []).append((e["step"], e["value"]))
    assert dash[("chief:0", "test_accuracy")] == [(STEPS, pytest.approx(acc, abs=1e-9))], dash
    for t in ("chief:0", "worker:0", "worker:1"):
        assert [s for s, _ in dash[(t, "loss")]][-1] == STEPS, dash.get((t, "loss"))

    # checkpoints: the chief's, the last two kept; no worker's temporary copy left
    ckpt = job / "ckpt"
    names = sorted(p.name for p in ckpt.iterdir())
    assert names == ["checkpoint", f"ckpt-{STEPS - 200}.data-00000-of-00001",
                     f"ckpt-{STEPS - 200}.index", f"ckpt-{STEPS}.data-00000-of-00001",
                     f"ckpt-{STEPS}.index"], names
    assert res["chief-0"]["checkpoint"] == str(ckpt / f"ckpt-{STEPS}")
    assert f'model_checkpoint_path: "ckpt-{STEPS}"' in (ckpt / "checkpoint").read_text()

    # summaries: each task's own directory; the chief's decoded
    tb = job / "tensorboard"
    for t in TASKS:
        assert list((tb / t).glob("events.out.tfevents.*")), f"no event file in {tb / t}"
    d = subprocess.run([str(tf_python), "-c", DECODE, str(tb / "chief-0"),
                        str(ckpt / f"ckpt-{STEPS}")], capture_output=True, text=True,
                       timeout=120, env=task_env())
    assert d.returncode == 0, d.stderr[-3000:]
    decoded = json.loads(d.stdout.split("DECODED ", 1)[1])
    sc = decoded["scalars"]
    loss = sc.get("loss")
    assert loss and [s for s, _ in loss] == list(range(50, STEPS + 1, 50)), sc.keys()
    assert loss[-1][1] < 0.6 * loss[0][1], loss  # it went down
    assert abs(loss[-1][1] - res["chief-0"]["final_loss"]) < 1e-5
    assert sc["test_accuracy"] == [[STEPS, pytest.approx(acc, abs=1e-6)]]
    assert len(sc["learning_rate"]) == len(loss)
    # the checkpoint holds the model: a 784 x 128 kernel among its variables
    shapes = decoded["shapes"]
    assert [784, 128] in shapes.values() and [128, 10] in shapes.values(), shapes
