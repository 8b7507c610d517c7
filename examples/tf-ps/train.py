"""train.py: TensorFlow's ParameterServerStrategy under loom, one program
for every role, switched on TF_CONFIG's task type.

- ps, worker: a tf.distribute.Server at this task's address in the
  cluster spec, serving until loom stops it (they are services).
- chief: the coordinator. ParameterServerStrategy over the cluster, every
  variable split in two (one shard on each ps), a ClusterCoordinator that
  schedules the training steps (closures) on the workers, a custom training
  loop (Keras 3 has no model.fit for this strategy), a checkpoint every
  --ckpt-every steps, resumed from at start; writes a results JSON and,
  when done, a DONE marker for the evaluator.
- evaluator (outside the cluster in TF_CONFIG): a side-car that evaluates
  each new checkpoint on Fashion-MNIST's test set, appends its metrics to
  eval.jsonl and writes TensorBoard summaries; it ends once it has
  evaluated the chief's final checkpoint (the DONE marker).

Data: Debian's dataset-fashion-mnist, read on each worker by tf.data
straight from the gzipped IDX files (nothing is shipped from the chief).

A worker restarted alone (`restart: task`) comes back at the address it
had: loom gives a restarted task the port it had, and TensorFlow's
ClusterCoordinator waits for a failed worker at that address.
"""
import argparse
import gzip
import json
import os
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
HIDDEN = 128


def dashboard():
    """metric(tag, step, value) for loom's dashboard (Loom.metric: a live
    chart per tag, a line per task); does nothing outside a loom job."""
    if "LOOM_COORD" not in os.environ:
        return lambda *_: None
    import loom
    handle = loom.Loom()

    def metric(tag, step, value):
        try:
            handle.metric(tag, step, value)
        except (loom.LoomError, ValueError) as e:
            log(f"metric {tag} not sent: {e}")
    return metric


def log(*a):
    print(f"[tf-ps {os.environ.get('LOOM_TASK', '?')}]", *a, flush=True)


def parse_args():
    job_dir = os.environ.get("LOOM_JOB_DIR", ".")
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600, help="training steps in all")
    ap.add_argument("--ckpt-every", type=int, default=50, help="steps between checkpoints")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--ckpt-dir", default=os.path.join(job_dir, "ckpt", "tf-ps"))
    ap.add_argument("--out", default=os.path.join(job_dir, "output", "tf-ps"),
                    help="the chief's results and the evaluator's metrics")
    ap.add_argument("--eval-examples", type=int, default=2000)
    ap.add_argument("--poll", type=float, default=0.5, help="evaluator: seconds between looks")
    return ap.parse_args()


# ---- data: Fashion-MNIST from the IDX files --------------------------------

def dataset(tf, split, batch, shuffle):
    """(x float32 [batch, 784] in 0..1, y int32 [batch]) read by tf.data where
    it runs (a worker, for a per-worker dataset)."""
    img = tf.data.FixedLengthRecordDataset(f"{DATA}/{split}-images-idx3-ubyte.gz", 784,
                                           header_bytes=16, compression_type="GZIP")
    lab = tf.data.FixedLengthRecordDataset(f"{DATA}/{split}-labels-idx1-ubyte.gz", 1,
                                           header_bytes=8, compression_type="GZIP")
    ds = tf.data.Dataset.zip((img, lab)).map(
        lambda i, l: (tf.cast(tf.io.decode_raw(i, tf.uint8), tf.float32) / 255.0,
                      tf.cast(tf.io.decode_raw(l, tf.uint8)[0], tf.int32)))
    if shuffle:
        ds = ds.shuffle(4096).repeat()
    return ds.batch(batch, drop_remainder=shuffle).prefetch(2)


def test_arrays(np, n):
    with gzip.open(f"{DATA}/t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(f"{DATA}/t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return x.astype(np.float32) / 255.0, y.astype(np.int32)


# ---- the model: a 784-128-10 MLP, its variables a tf.Module's ---------------

def make_model(tf):
    """The model's variables and the global step. Under the strategy's scope
    each variable is a ShardedVariable (one shard on each ps); outside it
    (the evaluator) plain variables of the same names and shapes, so either
    restores the other's checkpoints."""
    init = tf.random.stateless_normal
    m = tf.Module()
    m.w1 = tf.Variable(init([784, HIDDEN], seed=[1, 1]) * (2.0 / 784) ** 0.5, name="w1")
    m.b1 = tf.Variable(tf.zeros([HIDDEN]), name="b1")
    m.w2 = tf.Variable(init([HIDDEN, 10], seed=[1, 2]) * (2.0 / HIDDEN) ** 0.5, name="w2")
    m.b2 = tf.Variable(tf.zeros([10]), name="b2")
    return m


def params(m):
    return [m.w1, m.b1, m.w2, m.b2]


def shards(v):
    """A variable's shards: a ShardedVariable's parts, or the variable."""
    return list(getattr(v, "variables", [v]))


def full(tf, v):
    s = shards(v)
    return s[0] if len(s) == 1 else tf.concat(s, axis=0)


def logits(tf, ws, x):
    w1, b1, w2, b2 = ws
    return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2


def loss_fn(tf, lg, y):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=lg))


# ---- roles ---------------------------------------------------------------

def serve(tf, resolver, cfg):
    task = cfg["task"]
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"],
                                  task_index=task["index"], protocol="grpc", start=True)
    addr = cfg["cluster"][task["type"]][task["index"]]
    log(f"{task['type']} server up at {addr} (loom attempt {os.environ.get('LOOM_ATTEMPT')})")
    server.join()


def chief(tf, resolver, a):
    t0 = time.time()
    attempt = int(os.environ.get("LOOM_ATTEMPT", "0"))
    os.makedirs(a.ckpt_dir, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver,
        variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    coord = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = make_model(tf)
        step = tf.Variable(0, dtype=tf.int64, name="global_step")
    ckpt = tf.train.Checkpoint(model=model, step=step)
    mgr = tf.train.CheckpointManager(ckpt, a.ckpt_dir, max_to_keep=None)
    resumed_ckpt = mgr.latest_checkpoint
    if resumed_ckpt:
        ckpt.restore(resumed_ckpt).assert_existing_objects_matched()
    resumed = int(step.numpy())
    log(f"attempt {attempt}: starting at step {resumed}"
        f" ({'from ' + resumed_ckpt if resumed_ckpt else 'no checkpoint'})")

    def per_worker_dataset():
        return dataset(tf, "train", a.batch, shuffle=True)

    it = iter(coord.create_per_worker_dataset(per_worker_dataset))
    variables = [s for v in params(model) for s in shards(v)]

    @tf.function
    def train_step(iterator):
        x, y = next(iterator)
        with tf.GradientTape() as tape:
            tape.watch(variables)
            loss = loss_fn(tf, logits(tf, [full(tf, v) for v in params(model)], x), y)
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(a.lr * g)
        n = step.assign_add(1)
        # runs on the worker that executes this closure: its own log shows
        # which steps it ran (tests use it to see a restarted worker work)
        tf.print("tfps-closure step", n, output_stream=sys.stderr)
        return loss

    losses, saved, saved_at = [], [], []
    dash = dashboard()
    done = resumed
    while done < a.steps:
        n = min(a.ckpt_every - done % a.ckpt_every, a.steps - done)
        rvs = [coord.schedule(train_step, args=(it,)) for _ in range(n)]
        coord.join()
        chunk = [float(r.fetch()) for r in rvs]
        done = int(step.numpy())
        losses.append(sum(chunk) / len(chunk))
        dash("loss", done, losses[-1])
        path = mgr.save(checkpoint_number=done)
        saved.append(done)
        saved_at.append(round(time.time() - t0, 3))
        log(f"step {done}: loss {losses[-1]:.4f}, checkpoint {os.path.basename(path)} "
            f"at {saved_at[-1]:.1f} s")

    devices = {n: [s.device for s in shards(v)] for n, v in
               zip(("w1", "b1", "w2", "b2"), params(model))}
    devices["global_step"] = [step.device]
    res = {"job": os.environ.get("LOOM_JOB_ID"), "attempt": attempt, "target_steps": a.steps,
           "resumed_from_step": resumed, "resumed_from": resumed_ckpt, "steps_done": done,
           "steps_this_attempt": done - resumed, "checkpoints": saved, "checkpoint_times_s": saved_at,
           "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
           "losses": losses, "variable_devices": devices,
           "workers": len(resolver.cluster_spec().as_dict().get("worker", [])),
           "ps": len(resolver.cluster_spec().as_dict().get("ps", [])),
           "wall_s": round(time.time() - t0, 3)}
    tmp = os.path.join(a.out, f".chief-attempt-{attempt}.json")
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, os.path.join(a.out, f"chief-attempt-{attempt}.json"))
    with open(os.path.join(a.ckpt_dir, ".DONE"), "w") as f:
        json.dump({"job": os.environ.get("LOOM_JOB_ID"), "step": done}, f)
    os.replace(os.path.join(a.ckpt_dir, ".DONE"), os.path.join(a.ckpt_dir, "DONE"))
    log(f"done: {done} steps ({done - resumed} this attempt), loss {res['loss_first']} -> "
        f"{res['loss_last']}, in {res['wall_s']} s")


def evaluator(tf, np, a):
    """Evaluates each new checkpoint until the chief's final one is done."""
    os.makedirs(a.out, exist_ok=True)
    metrics = os.path.join(a.out, "eval.jsonl")
    seen = set()
    if os.path.exists(metrics):  # a retried attempt: what was evaluated before
        with open(metrics) as f:
            seen = {json.loads(l)["checkpoint"] for l in f if l.strip()}
    x, y = test_arrays(np, a.eval_examples)
    model = make_model(tf)
    step = tf.Variable(0, dtype=tf.int64, name="global_step")
    ckpt = tf.train.Checkpoint(model=model, step=step)
    tb = os.path.join(os.environ.get("LOOM_TENSORBOARD_DIR", a.out), "evaluator-0")
    writer = tf.summary.create_file_writer(tb)
    dash = dashboard()
    job = os.environ.get("LOOM_JOB_ID")
    log(f"watching {a.ckpt_dir}; metrics to {metrics}, summaries to {tb}")
    while True:
        try:
            with open(os.path.join(a.ckpt_dir, "DONE")) as f:
                done = json.load(f)
            done = done if done.get("job") == job else None
        except (OSError, ValueError):
            done = None
        latest = tf.train.latest_checkpoint(a.ckpt_dir)
        if latest and latest not in seen:
            try:
                ckpt.restore(latest).expect_partial()
            except (tf.errors.NotFoundError, tf.errors.DataLossError) as e:
                log(f"cannot read {latest} yet: {e}")
                time.sleep(a.poll)
                continue
            lg = logits(tf, [v for v in params(model)], x)
            loss = float(loss_fn(tf, lg, y))
            acc = float(np.mean(np.argmax(lg.numpy(), axis=1) == y))
            s = int(step.numpy())
            rec = {"checkpoint": latest, "step": s, "loss": loss, "accuracy": acc,
                   "examples": len(y), "t": time.time()}
            with open(metrics, "a") as f:
                f.write(json.dumps(rec) + "\n")
            with writer.as_default():
                tf.summary.scalar("eval/loss", loss, step=s)
                tf.summary.scalar("eval/accuracy", acc, step=s)
            dash("eval/loss", s, loss)
            dash("eval/accuracy", s, acc)
            writer.flush()
            seen.add(latest)
            log(f"checkpoint {os.path.basename(latest)}: step {s}, loss {loss:.4f}, "
                f"accuracy {acc:.4f}")
            continue
        if done and latest and latest in seen and os.path.basename(latest) == \
                f"ckpt-{done['step']}":
            log(f"the chief is done at step {done['step']}, evaluated")
            return
        time.sleep(a.poll)


def main():
    a = parse_args()
    cfg = json.loads(os.environ["TF_CONFIG"])
    role = cfg["task"]["type"]
    import numpy as np
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")  # keeps worker failures, drops retracing warnings
    if role in ("ps", "worker"):
        serve(tf, tf.distribute.cluster_resolver.TFConfigClusterResolver(), cfg)
    elif role == "chief":
        chief(tf, tf.distribute.cluster_resolver.TFConfigClusterResolver(), a)
        # Everything is on disk (checkpoints, results, DONE). TensorFlow's
        # teardown of the coordinator and its remote contexts at interpreter
        # exit took 1-7 s, and 17 s and 36 s after a worker's restart (a
        # loaded machine), keeping the job's end waiting: skip it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    elif role == "evaluator":
        evaluator(tf, np, a)
    else:
        sys.exit(f"train.py: no part for task type {role!r} (chief, worker, ps, evaluator)")


if __name__ == "__main__":
    main()
