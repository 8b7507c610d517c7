"""loom.tensorflow under loom: strategy() from TF_CONFIG, dataset() over the
job's feed, the Keras Callback (epoch metrics as loom metrics, checkpoints
in the model directory, local and hdfs://) and evaluator() (each new
checkpoint, to the chief's last). One job of a chief, a worker and an
evaluator fits y = 2 x1 - 3 x2 + 1 with MultiWorkerMirroredStrategy from
fixed-size records of the feed; a second job of a chief, a ps and a worker
checks the ParameterServerStrategy side."""
import json
import random
import struct

import pytest

from conftest import LIBLOOM, ROOT, pylib_env

RECORDS, FILES = 2048, 8
EPOCHS, STEPS = 4, 25

TRAIN = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import loom.tensorflow as ltf
import keras
import numpy as np
import tensorflow as tf

kind, index = ltf.task()
model_dir = sys.argv[1]


def model():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def strategy_kind(s):
    d = tf.distribute
    return ("mwms" if isinstance(s, d.MultiWorkerMirroredStrategy) else
            "ps" if isinstance(s, d.ParameterServerStrategy) else
            "mirrored" if isinstance(s, d.MirroredStrategy) else type(s).__name__)


if kind == "evaluator":
    grid = np.array([[x, y] for x in np.linspace(-1, 1, 5) for y in np.linspace(-1, 1, 5)],
                    np.float32)
    want = grid @ np.array([[2.0], [-3.0]], np.float32) + 1.0

    def ev(path):
        m = model()
        tf.train.Checkpoint(model=m).read(path).expect_partial()
        return {"mse": float(np.mean((m(grid).numpy() - want) ** 2))}

    print("EVAL " + json.dumps(ltf.evaluator(model_dir, ev, timeout=300)), flush=True)
    sys.exit(0)

s = ltf.strategy()
ds = ltf.dataset(shape=(3,), dtype="float32", cache=True, strategy=s)
n = int(ds.cardinality())
keras.utils.set_random_seed(1)
train = ds.map(lambda r: (r[:2], r[2:])).shuffle(4096, seed=index).repeat().batch(32)
cb = ltf.Callback(model_dir)
with s.scope():
    m = model()
    opt = keras.optimizers.SGD(0.1)
if sys.argv[2] == "fit":  # Keras' own loop (one process: Keras 3's fit has no multi-worker)
    m.compile(optimizer=opt, loss="mse")
    losses = m.fit(train, epochs=%(epochs)d, steps_per_epoch=%(steps)d, callbacks=[cb],
                   verbose=0).history["loss"]
else:  # a custom loop under MultiWorkerMirroredStrategy, the callback driven by hand
    opt.build(m.trainable_variables)
    it = iter(s.experimental_distribute_dataset(train))

    def one(b):
        x, y = b
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_mean((m(x, training=True) - y) ** 2,
                                                             axis=1), global_batch_size=32)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        return loss

    @tf.function
    def step():
        return s.reduce(tf.distribute.ReduceOp.SUM, s.run(one, args=(next(it),)), axis=None)

    cb.set_model(m)
    losses = []
    for epoch in range(%(epochs)d):
        losses.append(sum(float(step()) for _ in range(%(steps)d)) / %(steps)d)
        cb.on_epoch_end(epoch, {"loss": losses[-1]})
    cb.on_train_end()
k, b = m.get_weights()
print("RESULT " + json.dumps({"strategy": strategy_kind(s), "replicas": s.num_replicas_in_sync,
                              "records": n, "kernel": k.ravel().tolist(),
                              "bias": b.tolist(), "loss": losses}), flush=True)
""" % {"epochs": EPOCHS, "steps": STEPS}

PS = r"""
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import loom.tensorflow as ltf
s = ltf.strategy()  # a ps or a worker serves here and never returns
import tensorflow as tf
with s.scope():
    v = tf.Variable(3.0)
print("PSRESULT " + json.dumps({"ps": isinstance(s, tf.distribute.ParameterServerStrategy),
                                "device": v.device}), flush=True)
os._exit(0)  # the coordinator's teardown at exit takes seconds
"""


def lines(stdout, tag):
    """{task: the JSON of its line `[task] TAG {...}`}."""
    out = {}
    for line in stdout.splitlines():
        head, _, rest = line.partition("] ")
        if rest.startswith(tag + " "):
            out[head.lstrip("[")] = json.loads(rest[len(tag) + 1:])
    return out


def write_records(d):
    """FILES files of (x1, x2, y) float32 records, y = 2 x1 - 3 x2 + 1."""
    rng = random.Random(7)
    d.mkdir()
    for f in range(FILES):
        with open(d / f"part-{f}.bin", "wb") as out:
            for _ in range(RECORDS // FILES):
                x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
                out.write(struct.pack("<3f", x1, x2, 2 * x1 - 3 * x2 + 1))


def spec(loom, tf_python, model_dir, mode):
    """mwms: a chief and a worker in a custom loop; fit: one chief in
    Keras' fit. An evaluator beside either."""
    (loom.tmp / "train.py").write_text(TRAIN)
    write_records(loom.tmp / "data")
    cmd = f"{tf_python} train.py {model_dir} {mode}"
    worker = f"worker: {{command: '{cmd}', memory: 2GiB}}" if mode == "mwms" else ""
    return loom.spec(f"""
name: tfhelpers
env: {{PYTHONPATH: {ROOT / 'python'}, OMP_NUM_THREADS: "1", TF_CPP_MIN_LOG_LEVEL: "2"}}
files: {{train.py: train.py}}
roles:
  chief: {{command: '{cmd}', memory: 2GiB}}
  {worker}
  evaluator: {{command: '{cmd}', memory: 2GiB}}
feed:
  input: [data/part-*.bin]
  format: fixed:12
  epochs: 1
""")


def check_training(loom, r, mode):
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    res = lines(r.stdout, "RESULT")
    tasks = ["chief:0", "worker:0"] if mode == "mwms" else ["chief:0"]
    assert sorted(res) == tasks, r.stdout[-3000:]
    assert sum(x["records"] for x in res.values()) == RECORDS, res  # the feed's shares
    want = ("mwms", 2) if mode == "mwms" else ("_DefaultDistributionStrategy", 1)
    for t, x in res.items():
        assert (x["strategy"], x["replicas"]) == want, (t, x)
        assert x["records"] > 0, (t, x)
        assert x["kernel"] == pytest.approx([2.0, -3.0], abs=0.05), (t, x)
        assert x["bias"] == pytest.approx([1.0], abs=0.05), (t, x)
        assert len(x["loss"]) == EPOCHS and x["loss"][-1] < x["loss"][0], (t, x)
    # the replicas are in sync: the same weights on both tasks
    assert res["chief:0"]["kernel"] == res.get("worker:0", res["chief:0"])["kernel"], res
    ev = lines(r.stdout, "EVAL")["evaluator:0"]
    assert ev, r.stdout[-3000:]
    steps = [e["step"] for e in ev]
    assert steps == sorted(set(steps)) and steps[-1] == EPOCHS, ev
    assert ev[-1]["checkpoint"] == f"ckpt-{EPOCHS}" and ev[-1]["metrics"]["mse"] < 0.01, ev
    # the epochs' losses and the evaluations, as loom metrics
    metrics = [e for e in loom.events() if e.get("event") == "metric"
               and e.get("source", "user") == "user"]
    loss = sorted(e["step"] for e in metrics if e.get("task") == "chief:0"
                  and e.get("tag") == "loss")
    assert loss == list(range(1, EPOCHS + 1)), metrics[:10]
    mse = [(e["step"], e["value"]) for e in metrics if e.get("tag") == "eval/mse"]
    assert mse == [(x["step"], pytest.approx(x["metrics"]["mse"])) for x in ev], (mse, ev)
    return res, ev


def test_strategy_dataset_callback_and_evaluator(loom, tf_python):
    model_dir = loom.tmp / "model"
    r = loom.run("run", spec(loom, tf_python, model_dir, "mwms"),
                 env={"LOOM_LIBRARY": str(LIBLOOM), **pylib_env()}, timeout=400)
    check_training(loom, r, "mwms")
    # the chief's checkpoints, TensorFlow's state file, the end marker; the
    # worker's temporary directories removed
    names = sorted(p.name for p in model_dir.iterdir())
    for e in range(1, EPOCHS + 1):
        assert f"ckpt-{e}.index" in names, names
    assert not [n for n in names if n.startswith(("loom-tf-ckpt-", "."))], names
    assert (model_dir / "checkpoint").read_text() == f'model_checkpoint_path: "ckpt-{EPOCHS}"\n'
    done = json.loads((model_dir / "DONE").read_text())
    assert done["checkpoint"] == f"ckpt-{EPOCHS}" and done["step"] == EPOCHS, done
    assert done["job"] == loom.job_dir().name, done


def test_keras_fit_with_the_model_directory_on_hdfs(loom, tf_python, hdfs):
    url = hdfs.url(f"/tfhelpers-{loom.tmp.name}")
    r = loom.run("run", spec(loom, tf_python, url, "fit"),
                 env={"LOOM_LIBRARY": str(LIBLOOM), "HADOOP_CONF_DIR": str(hdfs.conf),
                      **pylib_env()}, timeout=400)
    check_training(loom, r, "fit")
    ls = loom.run("fs", "ls", url, env={"HADOOP_CONF_DIR": str(hdfs.conf)})
    assert ls.returncode == 0, ls.stderr
    assert f"{url}/ckpt-{EPOCHS}.index" in ls.stdout and f"{url}/DONE" in ls.stdout, ls.stdout
    cat = loom.run("fs", "cat", f"{url}/checkpoint", env={"HADOOP_CONF_DIR": str(hdfs.conf)})
    assert cat.stdout == f'model_checkpoint_path: "ckpt-{EPOCHS}"\n', cat
    loom.run("fs", "rm", "-r", url, env={"HADOOP_CONF_DIR": str(hdfs.conf)})


def test_strategy_with_ps_in_the_cluster(loom, tf_python):
    (loom.tmp / "ps.py").write_text(PS)
    cmd = f"{tf_python} ps.py"
    s = loom.spec(f"""
name: tfhelpersps
env: {{PYTHONPATH: {ROOT / 'python'}, OMP_NUM_THREADS: "1"}}
files: {{ps.py: ps.py}}
roles:
  chief: {{command: '{cmd}', memory: 2GiB}}
  worker: {{command: '{cmd}', memory: 2GiB, service: true}}
  ps: {{command: '{cmd}', memory: 2GiB}}
""")
    r = loom.run("run", s, env={"LOOM_LIBRARY": str(LIBLOOM), **pylib_env()}, timeout=300)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-5000:]
    res = lines(r.stdout, "PSRESULT")
    assert list(res) == ["chief:0"], r.stdout[-3000:]  # the others served, and were stopped
    assert res["chief:0"]["ps"] is True, res
    assert "/job:ps/" in res["chief:0"]["device"], res
