"""loom.compat.tensorflowonspark: a TensorFlowOnSpark program, written as
TensorFlowOnSpark's MNIST examples are and with its import changed
(tests/system/spark/tfos_mnist.py), submitted with Spark's own
spark-submit to local-cluster[2,1,1024] (two executor JVMs), on real
Fashion-MNIST.

Checked: InputMode.TENSORFLOW's nodes (chief and worker, their ctx and
TF_CONFIG); an exception in a node raised by shutdown() as TaskError with
the remote traceback; refused arguments named before anything starts;
InputMode.SPARK training that feeds every row of every epoch once, as the
rows the RDD held, to DataFeed; inference whose RDD has each test row's
result exactly once, from a model that learned (accuracy well above
chance); nothing of any job left."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import LOOM, ROOT, SANITIZED, loom_pids_of

SPARK_PYTHON = Path(os.environ.get("LOOM_SPARK_PYTHON", ROOT / ".venv-spark" / "bin" / "python"))
PROGRAM = Path(__file__).parent / "spark" / "tfos_mnist.py"
DATA = Path("/usr/share/datasets/fashion-mnist")



def records(rows):
    """The records loom.spark.train writes for rows (the spill's layout: a
    row's numbers in order, a bool a byte, an int a little-endian int64, a
    float a float64) and their offsets, as Feed.read_view gives them."""
    import struct
    from loom._spill import _flat
    data, offs = b"", [0]
    for r in rows:
        for v in _flat(r):
            data += struct.pack("<?" if isinstance(v, bool) else "<q" if isinstance(v, int)
                                else "<d", v)
        offs.append(len(data))
    return memoryview(data), memoryview(struct.pack(f"<{len(offs)}Q", *offs))


def test_rows_come_back_as_the_rdd_held_them(monkeypatch):
    """DataFeed's rows: the first row's nesting (lists, tuples, numpy arrays
    of their dtype and shape, numpy scalars) applied to each record."""
    import numpy as np
    monkeypatch.syspath_prepend(str(ROOT / "python"))
    from loom.compat.tensorflowonspark._rows import Layout
    rows = [([float(i), 2.5 * i], np.arange(6, dtype=np.int32).reshape(2, 3) + i, True, i,
             (np.float32(i / 4), [i, -i])) for i in range(5)]
    back = Layout(rows[0]).rows(*records(rows))
    assert len(back) == 5
    for a, b in zip(rows, back):
        assert isinstance(b, tuple) and b[0] == a[0] and b[2] is True and b[3] == a[3]
        assert b[1].dtype == np.int32 and b[1].shape == (2, 3) and (b[1] == a[1]).all()
        assert isinstance(b[4], tuple) and b[4][0] == a[4][0] and b[4][1] == a[4][1]
        assert b[4][0].dtype == np.float32
    flat = [[float(j) for j in range(i, i + 785)] for i in range(3)]  # the examples' rows
    assert Layout(flat[0]).rows(*records(flat)) == flat
    raw = [b"ab", b"cd"]
    data = memoryview(b"abcd")
    offs = memoryview(np.array([0, 2, 4], np.uint64).tobytes())
    assert Layout(raw[0]).rows(data, offs) == raw
    with pytest.raises(TypeError, match="holds a dict"):
        Layout(({"a": 1},))


spark_only = [
    pytest.mark.skipif(not SPARK_PYTHON.exists(),
                       reason=f"no Spark environment at {SPARK_PYTHON}: run "
                              "scripts/setup-spark.sh"),
    pytest.mark.skipif(SANITIZED, reason="a Spark driver of its own: runs in the normal pass "
                       "(loom.spark's C paths run under ASan in test_spark)"),
]


def spark_submit():
    out = subprocess.run([str(SPARK_PYTHON), "-c", "import pyspark, os; "
                          "print(os.path.dirname(pyspark.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@spark_only[0]
@spark_only[1]
def test_a_tensorflowonspark_program_runs_with_its_import_changed(loom, tmp_path):
    assert DATA.is_dir(), f"{DATA}: apt-get install dataset-fashion-mnist"
    home = spark_submit()
    fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(SPARK_HOME=str(home), PYSPARK_PYTHON=str(SPARK_PYTHON),
               PYSPARK_DRIVER_PYTHON=str(SPARK_PYTHON), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOCAL_HOSTNAME="localhost", LOOM_HOME=str(loom.home), LOOM_BIN=str(LOOM),
               NO_COLOR="1", PYTHONPATH=str(ROOT / "python"))
    cmd = [str(home / "bin" / "spark-submit"), "--master", "local-cluster[2,1,1024]",
           "--conf", f"spark.driver.extraJavaOptions={fast}",
           "--conf", f"spark.executor.extraJavaOptions={fast}",
           "--conf", "spark.ui.showConsoleProgress=false",
           # a node's exception fails the job at once (Spark's default: 4
           # tries, each a loom attempt)
           "--conf", "spark.task.maxFailures=1",
           "--conf", f"spark.executorEnv.PYTHONPATH={ROOT / 'python'}",
           str(PROGRAM), "--cluster_size", "2", "--rows", "3000", "--test_rows", "1000",
           "--epochs", "3"]
    p = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    res = {}
    for l in p.stdout.splitlines():
        if l.startswith("RESULT "):
            r = json.loads(l[7:])
            res.setdefault(r["what"], []).append(r)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-5000:])

    # InputMode.TENSORFLOW: a chief and a worker (master_node="chief"), in
    # TensorFlowOnSpark's executor order, with TF_CONFIG
    vals = res["tensorflow"][0]["values"]
    assert sorted(vals) == ["chief:0", "worker:0"], vals
    for name, v in vals.items():
        role, index = name.split(":")
        assert (v["job_name"], v["task_index"]) == (role, int(index)), v
        assert v["tf_config"]["task"] == {"type": role, "index": int(index)}, v
        assert sorted(v["tf_config"]["cluster"]) == ["chief", "worker"], v
        assert v["num_workers"] == 2 and v["cluster"] == ["chief", "worker"], v
        assert v["abs"] == f"file://{tmp_path}/models/x", v
    assert vals["chief:0"]["executor_id"] == 0 and vals["worker:0"]["executor_id"] == 1, vals

    # a node's exception: shutdown() raises it, traceback and all
    r = res["raise"][0]
    assert r["error"] == "TaskError" and "worker:0" in r["message"], r
    assert "RuntimeError: boom in worker:0" in r["remote"] and "info_fun" in r["remote"], r

    # arguments loom cannot honour: named
    errs = [r["error"] for r in res["refused"]]
    assert errs[0] and "tensorboard=True" in errs[0], errs
    assert errs[1] and "driver_ps_nodes=True" in errs[1], errs

    # InputMode.SPARK: every row of every epoch read once, as 785 numbers
    vals = res["train"][0]["values"]
    assert sorted(vals) == ["worker:0", "worker:1"], vals
    assert sum(v["rows"] for v in vals.values()) == 3 * 3000, vals
    # (the feed's splits go to whichever task asks first: the shares may
    # be uneven, even empty, but add up)
    assert all(v["should_stop"] for v in vals.values()), vals
    assert sum(v["steps"] for v in vals.values()) >= 9000 // 64, vals
    assert all(Path(v["model"]).is_file() for v in vals.values()), vals

    # inference: one result per test row, exactly once, from a model that
    # learned (10 classes: chance is 10 %)
    r = res["inference"][0]
    out, labels = r["results"], r["labels"]
    assert len(out) == len(labels) == 1000, (len(out), out[:5])
    got = sorted(int(s.split()[0]) for s in out)
    assert got == sorted(labels), "each test row's result exactly once"
    acc = sum(a == b for a, b in (s.split() for s in out)) / len(out)
    assert acc > 0.6, acc

    # TFParallel: independent instances, each alone (no TF_CONFIG)
    assert res["parallel"][0]["nodes"] == [
        {"worker_num": i, "executor_id": i, "num_workers": 2, "tf_config": False}
        for i in (0, 1)], res["parallel"]

    assert not loom_pids_of(loom.home)
    jobs = sorted((loom.home / "jobs").iterdir())
    assert len(jobs) == 5, jobs  # two TENSORFLOW clusters, train, inference, TFParallel
    for j in jobs:
        st = json.loads((j / "state.json").read_text())
        assert st["state"] in ("succeeded", "failed"), (j, st["state"])
