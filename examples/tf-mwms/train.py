"""train.py: a Keras MLP on Fashion-MNIST trained with TensorFlow's
MultiWorkerMirroredStrategy, its input from loom's data feed.

Under loom (`loom run job.yaml`): TF_CONFIG, set by loom, names the chief
and the workers and the port each reserved; the strategy starts TensorFlow's
gRPC server on this task's port and all-reduces the gradients of every step
over the tasks (the RING collective). Each task reads its own share of the
training records from the feed (`loom.Feed`, the spec's `feed:`): a
`tf.data.Dataset.from_generator` over feed batches, cached in memory on a
first pass made before training starts, then shuffled and repeated: every
task takes exactly --steps steps of --batch / replicas records, as a
synchronous strategy needs. (Why the first pass comes first: the feed starts
a task on its next split only when one is free, and the last ones are free
only when their holders finish them; in lockstep training a holder waits at
the next all-reduce for the task that waits for its split.)

Without loom (no LOOM_COORD, no TF_CONFIG): the same script in one process,
a single-worker strategy with one replica on the same global batch, reading
the record files of --data itself: the reference to compare with.

Writes checkpoints (tf.train.CheckpointManager; the chief into --ckpt-dir,
the others into temporary directories inside it that they remove, as
TensorFlow's multi-worker saving requires), TensorBoard summaries into
--tb-dir/<role>-<index> (default $LOOM_TENSORBOARD_DIR), and a JSON result
(--result, printed too as a line `RESULT {...}`): replicas, the collective
checks, loss, and on the chief the test accuracy."""
import argparse
import glob
import json
import os
import shutil
import sys
import time

import numpy as np

REC = 785  # a record: the label, then 28x28 pixels (prepare.py)
SUM_N = 1031  # the collective check's vector length: a prime, not a multiple of anything


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data", help="prepare.py's output: test.idx (and "
                    "train-*.idx, read directly when not under loom)")
    ap.add_argument("--steps", type=int, default=800, help="optimizer steps, every replica")
    ap.add_argument("--batch", type=int, default=192, help="global batch, all replicas together")
    ap.add_argument("--lr", type=float, default=0.1, help="peak SGD learning rate (cosine decay)")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1, help="the initial model")
    ap.add_argument("--data-seed", type=int, default=1, help="each task's shuffle")
    ap.add_argument("--log-every", type=int, default=50, help="steps between summaries")
    ap.add_argument("--ckpt-dir", default="", help="checkpoints (none if empty)")
    ap.add_argument("--ckpt-every", type=int, default=200,
                    help="steps between checkpoints (0: at the end only)")
    ap.add_argument("--tb-dir", default=os.environ.get("LOOM_TENSORBOARD_DIR", ""),
                    help="summaries go to <tb-dir>/<role>-<index> (none if empty)")
    ap.add_argument("--result", default="result.json")
    ap.add_argument("--threads", type=int, default=1, help="TensorFlow threads per op")
    return ap.parse_args(argv)


def read_idx(path):
    """A uint8 idx file as a numpy array."""
    with open(path, "rb") as f:
        head = f.read(4)
        if head[:3] != b"\0\0\x08":
            raise ValueError(f"{path}: not an idx file of unsigned bytes")
        dims = [int.from_bytes(f.read(4), "big") for _ in range(head[3])]
        return np.fromfile(f, np.uint8).reshape(dims)


def dashboard(who):
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
            log(who, f"metric {tag} not sent: {e}")
    return metric


def log(who, msg):
    print(f"{who}: {msg}", flush=True)


def main(argv=None):
    a = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import keras

    under_loom = "LOOM_COORD" in os.environ
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task") or {"type": "chief", "index": 0}
    role, index = task["type"], int(task["index"])
    who = f"{role}:{index}"
    # the chief writes; with no chief in the cluster, worker 0 does
    is_chief = role == "chief" or (role == "worker" and index == 0 and
                                   "chief" not in tf_config.get("cluster", {}))

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(a.threads + 1)
    keras.utils.set_random_seed(a.seed)  # the same initial model everywhere
    # First, before any other TensorFlow op: reads TF_CONFIG and starts this
    # task's gRPC server on the port in it (without TF_CONFIG: one worker).
    ring = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=ring))
    R = strategy.num_replicas_in_sync
    if a.batch % R:
        sys.exit(f"{who}: --batch {a.batch} is not a multiple of the {R} replicas")
    per_replica = a.batch // R
    SUM = tf.distribute.ReduceOp.SUM
    log(who, f"{R} replicas in sync, global batch {a.batch} ({per_replica} a replica), "
        f"TF_CONFIG cluster {tf_config.get('cluster', {})}")
    t_start = time.time()

    # ---- every replica is here: what each sees, gathered everywhere -------
    def hello():
        ctx = tf.distribute.get_replica_context()
        rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
        return tf.reshape(tf.stack([rid, tf.constant(ctx.num_replicas_in_sync)]), [1, 2])

    @tf.function
    def gather(fn):  # fn's value on every replica, concatenated, on every task
        return strategy.gather(strategy.run(fn), axis=0)

    @tf.function
    def total(fn):  # fn's value summed over the replicas, on every task
        return strategy.reduce(SUM, strategy.run(fn), axis=None)

    seen = gather(hello).numpy().tolist()  # the first collective: every task is here
    replica_id = int(tf.function(lambda: strategy.experimental_local_results(strategy.run(
        lambda: tf.distribute.get_replica_context().replica_id_in_sync_group))[0])())

    # ---- this task's share of the training records ------------------------
    batch_of = 1024
    if under_loom:
        import loom
        feed = loom.Feed()
        buf = np.empty((batch_of, REC), np.uint8)

        def feed_batch():
            while True:
                b = feed.array_batch(batch_of, REC, out=buf)
                if b is not loom.EPOCH:
                    return None if b is loom.END else b.copy()

        # The first batch before the barrier: this task holds a split's lease
        # before any task drains the rest, so no share is empty.
        first = feed_batch()
        total(lambda: tf.constant(1.0))  # a barrier

        def source():
            b = first
            while b is not None:
                yield b
                b = feed_batch()
    else:
        files = sorted(glob.glob(os.path.join(a.data, "train-*.idx")))
        if not files:
            sys.exit(f"{who}: no {a.data}/train-*.idx: run prepare.py first")

        def source():
            for p in files:
                yield read_idx(p)

    share = tf.data.Dataset.from_generator(
        source, output_signature=tf.TensorSpec((None, REC), tf.uint8)).unbatch().cache()
    t0 = time.time()
    n_share = int(share.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1))  # fills the cache
    if under_loom:
        st = feed.stats()
        feed.close()
        log(who, f"{n_share} records from the feed in {time.time() - t0:.2f}s, "
            f"{st['splits']} splits, waited {st['wait_s']:.2f}s")
    else:
        log(who, f"{n_share} records from {len(files)} files")
    if n_share < per_replica:
        sys.exit(f"{who}: {n_share} records, fewer than a batch of {per_replica}")

    def dataset_fn(ctx):
        b = ctx.get_per_replica_batch_size(a.batch)
        return (share.shuffle(n_share, seed=a.data_seed * 1000 + ctx.input_pipeline_id)
                .repeat().batch(b, drop_remainder=True).prefetch(2))

    it = iter(strategy.distribute_datasets_from_function(dataset_fn))

    # ---- the model, the optimizer, checkpoints ------------------------------
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((784,)),
            keras.layers.Dense(a.hidden, activation="relu"),
            keras.layers.Dense(10),
        ])
        lr = keras.optimizers.schedules.CosineDecay(a.lr, decay_steps=a.steps)
        optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=a.momentum)
        optimizer.build(model.trainable_variables)
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

    manager = None
    if a.ckpt_dir:
        # TensorFlow's multi-worker saving: every task saves (saving may run
        # collectives), only the chief's copy is kept
        write_dir = a.ckpt_dir if is_chief else os.path.join(a.ckpt_dir,
                                                             f"workertemp-{role}-{index}")
        manager = tf.train.CheckpointManager(ckpt, write_dir, max_to_keep=2)
        latest = tf.train.latest_checkpoint(a.ckpt_dir)
        if latest:
            ckpt.restore(latest)
            log(who, f"restored {latest} at step {int(optimizer.iterations.value.numpy())}")

    def save(step):
        if manager:
            path = manager.save(checkpoint_number=step)
            if not is_chief:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            return path

    dash = dashboard(who)
    writer = None
    if a.tb_dir:
        writer = tf.summary.create_file_writer(os.path.join(a.tb_dir, f"{role}-{index}"))

    # ---- training: the same --steps on every replica ------------------------
    with strategy.scope():  # each replica's running loss; read: summed over them
        loss_sum = tf.Variable(0.0, trainable=False,
                               synchronization=tf.VariableSynchronization.ON_READ,
                               aggregation=tf.VariableAggregation.SUM)

    def step_fn(batch):
        x = tf.cast(batch[:, 1:], tf.float32) / 255.0
        y = tf.cast(batch[:, 0], tf.int32)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_ex = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            # a share of the global mean: the optimizer sums the replicas' gradients
            loss = tf.nn.compute_average_loss(per_ex, global_batch_size=a.batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        loss_sum.assign_add(loss)

    @tf.function
    def train_steps(iterator, k):  # k steps in one call: no Python between them
        for _ in tf.range(k):
            strategy.run(step_fn, args=(next(iterator),))

    @tf.function
    def take_loss():  # the global mean loss summed since the last call: a collective
        v = loss_sum.read_value()
        loss_sum.assign(0.0)
        return v

    log_every = max(1, a.log_every)
    ckpt_every = a.ckpt_every if a.ckpt_every > 0 else a.steps  # else only at the end
    step = start = int(optimizer.iterations.value.numpy())
    mean, t_train = None, time.time()
    while step < a.steps:
        k = min(log_every - step % log_every, ckpt_every - step % ckpt_every,
                a.steps - step)
        train_steps(it, tf.constant(k))
        step += k
        mean = float(take_loss()) / k
        rate = (step - start) * a.batch / (time.time() - t_train)
        log(who, f"step {step} loss {mean:.4f} ({rate:.0f} samples/s, all replicas)")
        if writer:
            with writer.as_default(step=step):
                tf.summary.scalar("loss", mean)
                tf.summary.scalar("learning_rate", float(lr(step - 1)))
                tf.summary.scalar("samples_per_s", rate)
        dash("loss", step, mean)
        dash("samples_per_s", step, rate)
        if step % ckpt_every == 0 and step < a.steps:
            save(step)
    train_s = time.time() - t_train
    saved = save(step)

    # ---- collectives checked exactly ----------------------------------------
    # replica r contributes v_r[j] = 1000 (r + 1) + j (exact in float32); the
    # sum over R replicas is 1000 R (R + 1) / 2 + R j
    def distinct():
        r = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        return 1000.0 * (r + 1.0) + tf.range(SUM_N, dtype=tf.float32)

    got = total(distinct).numpy()
    want = 1000.0 * R * (R + 1) / 2 + R * np.arange(SUM_N, dtype=np.float64)
    shares = gather(lambda: tf.constant([float(n_share)], tf.float64)).numpy()
    # every replica's copy of the first layer's weights, summed: all equal
    checksum = gather(lambda: tf.reshape(tf.reduce_sum(
        tf.cast(model.trainable_variables[0], tf.float64)), [1])).numpy()

    result = {
        "task": who, "role": role, "index": index, "chief": is_chief, "tf_config": tf_config,
        "replica_id": replica_id,
        "num_replicas_in_sync": R, "replicas_saw": seen,
        "sum_check": {"n": SUM_N, "got_first": float(got[0]), "got_last": float(got[-1]),
                      "got_total": float(got.astype(np.float64).sum()),
                      "max_abs_err": float(np.abs(got - want).max()),
                      "exact": bool(np.array_equal(got.astype(np.float64), want))},
        "records": n_share, "shares": shares.tolist(), "weights_checksums": checksum.tolist(),
        "steps": step, "global_batch": a.batch, "per_replica_batch": per_replica,
        "final_loss": mean,
        "train_s": round(train_s, 3), "total_s": round(time.time() - t_start, 3),
        "checkpoint": saved if is_chief else None,
    }

    # ---- the chief evaluates the test set -----------------------------------
    if is_chief:
        test = read_idx(os.path.join(a.data, "test.idx"))
        x = tf.constant(test[:, 1:].astype(np.float32) / 255.0)
        pred = np.argmax(model(x, training=False).numpy(), axis=1)
        result["test_accuracy"] = float(np.mean(pred == test[:, 0]))
        result["test_examples"] = int(len(test))
        if writer:
            with writer.as_default(step=step):
                tf.summary.scalar("test_accuracy", result["test_accuracy"])
        dash("test_accuracy", step, result["test_accuracy"])
        log(who, f"test accuracy {result['test_accuracy']:.4f} on {len(test)} images after "
            f"{step} steps of {a.batch}")
    if writer:
        writer.close()
    with open(a.result, "w") as f:
        json.dump(result, f, indent=1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
