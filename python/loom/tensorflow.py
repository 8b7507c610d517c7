"""loom.tensorflow: TensorFlow in a loom task, thinly.

    import loom.tensorflow as ltf
    strategy = ltf.strategy()                 # from TF_CONFIG
    ds = ltf.dataset(shape=(785,), cache=True, strategy=strategy)
    with strategy.scope():
        model = ...
    model.fit(ds.repeat().batch(64), epochs=5, steps_per_epoch=100,
              callbacks=[ltf.Callback(model_dir="hdfs:///models/m1")])
    # (one process: Keras 3's fit does not run multi-worker; there, a
    # custom loop calls the callback's on_epoch_end and on_train_end)

    # the evaluator role
    ltf.evaluator("hdfs:///models/m1", lambda ckpt: {"accuracy": ...})

strategy() picks TensorFlow's strategy from what loom put in TF_CONFIG:
ParameterServerStrategy on the chief when the cluster has ps (a ps or
worker task runs its tf.distribute.Server there and never returns),
MultiWorkerMirroredStrategy when the cluster has more than one chief or
worker, else one process's (MirroredStrategy over its GPUs, or the default
strategy). dataset() is a tf.data.Dataset over the task's data feed, the
feed deciding which records each task reads (TensorFlow's auto-sharding
is off). Callback reports Keras' epoch logs as loom metrics and writes
checkpoints to a local or hdfs:// model directory; evaluator() evaluates
each new checkpoint there until the chief's last one. See docs/python.md,
"TensorFlow in a task". Importing this module imports TensorFlow."""
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from .feed import END, EPOCH, Feed

__all__ = ["tf_config", "task", "is_chief", "strategy", "dataset", "Callback", "evaluator",
           "DONE"]

DONE = "DONE"  # the chief's marker in the model directory: {"checkpoint": ..., "step": ...}


def tf_config() -> Dict[str, Any]:
    """TF_CONFIG as loom set it ({} outside a job)."""
    try:
        v = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError as e:
        raise RuntimeError(f"loom.tensorflow: TF_CONFIG is not JSON: {e}") from None
    return v if isinstance(v, dict) else {}


def task() -> Tuple[str, int]:
    """(task type, index) from TF_CONFIG; ("chief", 0) outside a job."""
    t = tf_config().get("task") or {}
    return str(t.get("type", "chief")), int(t.get("index", 0))


def is_chief() -> bool:
    """The task that writes: the chief, or worker 0 when the cluster has no
    chief, or the one process outside a job."""
    kind, index = task()
    cluster = tf_config().get("cluster") or {}
    return kind == "chief" or (kind == "worker" and index == 0 and "chief" not in cluster)


def _local_strategy() -> Any:
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.MirroredStrategy() if len(gpus) > 1 else tf.distribute.get_strategy()


def strategy(**kwargs: Any) -> Any:
    """TensorFlow's strategy for this task, from TF_CONFIG; kwargs go to its
    constructor. With ps in the cluster: the chief gets a
    ParameterServerStrategy (TFConfigClusterResolver), and a ps or worker
    task runs its tf.distribute.Server and does not return (loom stops it
    at the job's end: make worker a service, as ps is). With more than one
    chief or worker: MultiWorkerMirroredStrategy (call it first, before
    any other TensorFlow op: it starts this task's server on the port loom
    reserved). One task, the evaluator, tensorboard, or no TF_CONFIG:
    MirroredStrategy over this process's GPUs when it has several, else
    the default strategy."""
    cluster = tf_config().get("cluster") or {}
    kind, index = task()
    if kind in ("evaluator", "tensorboard") or not cluster:
        return _local_strategy()
    if cluster.get("ps"):
        if kind in ("ps", "worker"):
            server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=kind,
                                          task_index=index, protocol="grpc", start=True)
            server.join()  # serves until loom stops the task
            raise SystemExit(0)
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.ParameterServerStrategy(resolver, **kwargs)
    if len(cluster.get("chief", [])) + len(cluster.get("worker", [])) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy(**kwargs)
    return _local_strategy()


# ---- the feed as a dataset -----------------------------------------------

class _Source:
    """One feed per process, read in batches of read records: fixed-size
    records as numpy arrays (shape, dtype), else lists of bytes."""

    def __init__(self, shape: Optional[Tuple[int, ...]], dtype: Any, read: int):
        self.shape, self.dtype, self.read = shape, dtype, read
        self.feed: Optional[Feed] = None
        self.over = False

    def next(self) -> Any:
        """The next batch (an array, or an object array of bytes), or None
        at the feed's end; epochs follow each other."""
        if self.over:
            return None
        if self.feed is None:
            self.feed = Feed()
        while True:
            if self.shape is not None:
                b = self.feed.array_batch(self.read, self.shape, self.dtype)
            else:
                b = self.feed.batch(self.read)
            if b is EPOCH:
                continue
            if b is END:
                self.feed.close()
                self.feed = None
                self.over = True
                return None
            if self.shape is not None:
                return np.array(b, copy=True)
            arr = np.empty(len(b), dtype=object)
            arr[:] = b
            return arr

    def batches(self) -> Iterator[Any]:
        while True:
            b = self.next()
            if b is None:
                return
            yield b


def _no_autoshard(ds: Any) -> Any:
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(opts)


def _barrier(strat: Any) -> None:
    """Every replica of strat's cluster reaches this point."""
    if strat is None or strat.num_replicas_in_sync < 2:
        return
    one = tf.function(lambda: strat.reduce(tf.distribute.ReduceOp.SUM,
                                           strat.run(lambda: tf.constant(1.0)), axis=None))
    one()


def dataset(shape: Optional[Union[int, Sequence[int]]] = None, dtype: Any = "uint8",
            batch_size: Optional[int] = None, drop_remainder: bool = False,
            cache: bool = False, strategy: Any = None, read: int = 1024) -> Any:
    """A tf.data.Dataset of this task's records from the job's feed, every
    epoch the feed has, to its end. With shape: fixed-size records (the
    feed's `fixed:<bytes>` or `idx` format), each a tensor of dtype (a
    TensorFlow or numpy dtype, or its name) of that shape; without: a
    tf.string a record (`tfrecord` records: tf.io.parse_single_example
    them; `lines`). batch_size batches it. TensorFlow's auto-sharding is
    off: the feed already gives each task its own records.

    cache=True reads this task's whole share now, into memory, and returns
    a dataset of it that can be repeated: what a synchronous strategy
    (MultiWorkerMirroredStrategy) needs, since every replica must take the
    same number of steps (repeat() it and give fit() steps_per_epoch) and
    a task must not wait for a split while its holder waits at an
    all-reduce. With strategy given, every task first reads one batch and
    meets the others, so that no task's share is empty. Without cache the
    dataset streams the feed, once: a ParameterServerStrategy's worker or
    one process."""
    shp: Optional[Tuple[int, ...]] = None
    if shape is not None:
        shp = (int(shape),) if isinstance(shape, int) else tuple(int(x) for x in shape)
    tdtype = tf.as_dtype(dtype)
    src = _Source(shp, tdtype.as_numpy_dtype if shp is not None else None, read)
    spec = (tf.TensorSpec((None,) + shp, tdtype) if shp is not None
            else tf.TensorSpec((None,), tf.string))
    if cache:
        first = src.next()
        _barrier(strategy)
        parts = [first] if first is not None else []
        parts += list(src.batches())
        if not parts:
            raise RuntimeError("loom.tensorflow.dataset: this task's share of the feed is empty "
                               "(give the feed more splits than tasks, or pass strategy= so "
                               "that every task takes one first)")
        data = np.concatenate(parts)
        ds = tf.data.Dataset.from_tensor_slices(tf.constant(data, dtype=spec.dtype))
    else:
        ds = tf.data.Dataset.from_generator(src.batches, output_signature=spec).unbatch()
    if batch_size:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return _no_autoshard(ds)


# ---- model directories: local or hdfs:// ----------------------------------

def _remote(path: str) -> bool:
    from ._find import remote
    return remote(path)


def _fs(*args: str, check: bool = True) -> "subprocess.CompletedProcess[bytes]":
    """`loom fs ARGS` (FsError, an OSError, on failure)."""
    from ._find import fs
    return fs(*args, text=False, check=check)


def _read(d: str, name: str) -> Optional[bytes]:
    """The file name in the model directory d, or None when it is not there."""
    if _remote(d):
        r = _fs("cat", f"{d}/{name}", check=False)
        return r.stdout if r.returncode == 0 else None
    try:
        with open(os.path.join(d, name), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write(d: str, name: str, data: bytes) -> None:
    """Writes name in d whole (a temporary name, then a rename)."""
    if _remote(d):
        with tempfile.NamedTemporaryFile() as f:
            f.write(data)
            f.flush()
            _fs("put", "-f", f.name, f"{d}/{name}")
        return
    tmp = os.path.join(d, f".{name}.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(d, name))


def _latest(d: str) -> Optional[str]:
    """The checkpoint prefix TensorFlow's `checkpoint` state file in d names
    last (its base name), or None."""
    st = _read(d, "checkpoint")
    if not st:
        return None
    for line in st.decode(errors="replace").splitlines():
        if line.startswith("model_checkpoint_path:"):
            return os.path.basename(line.split(":", 1)[1].strip().strip('"'))
    return None


def _step_of(prefix: str) -> int:
    tail = prefix.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


class Callback(tf.keras.callbacks.Callback):
    """A Keras callback: each epoch's logs (loss, metrics, val_*) become
    loom metrics at the epoch's number (from 1; prefix before each tag),
    which the dashboard charts and events.jsonl keeps; with model_dir
    (local or hdfs://), a checkpoint of the model every `every` epochs and
    at the end (tf.train.Checkpoint(model=...): ckpt-<epoch> and
    TensorFlow's `checkpoint` state file, which tf.train.latest_checkpoint
    and evaluator() read). Only the chief writes there: the other tasks of
    a multi-worker strategy save into a temporary directory they remove,
    as TensorFlow's multi-worker saving requires. At the end the chief
    writes DONE ({"checkpoint", "step"}), which tells evaluator() which
    checkpoint is the last."""

    def __init__(self, model_dir: Optional[str] = None, every: int = 1, metrics: bool = True,
                 prefix: str = "") -> None:
        super().__init__()
        if every < 1:
            raise ValueError(f"loom.tensorflow.Callback: every must be at least 1, got {every}")
        self.model_dir = model_dir.rstrip("/") if model_dir else None
        self.every = every
        self.prefix = prefix
        self._loom: Any = None
        if metrics and os.environ.get("LOOM_COORD"):
            from .core import Loom
            self._loom = Loom()
        self._saved: Optional[Tuple[str, int]] = None
        self._epoch = 0

    def on_epoch_end(self, epoch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self._epoch = epoch + 1
        if self._loom is not None:
            for k, v in (logs or {}).items():
                try:
                    x = float(v)
                except (TypeError, ValueError):
                    continue
                if np.isfinite(x):
                    self._loom.metric(self.prefix + k, self._epoch, x)
        if self.model_dir and self._epoch % self.every == 0:
            self._save(self._epoch)

    def on_train_end(self, logs: Optional[Dict[str, Any]] = None) -> None:
        if not self.model_dir:
            return
        if self._saved is None or self._saved[1] != self._epoch:
            self._save(self._epoch)
        if is_chief() and self._saved is not None:
            _write(self.model_dir, DONE, json.dumps(
                {"checkpoint": self._saved[0], "step": self._saved[1],
                 "job": os.environ.get("LOOM_JOB_ID")}).encode())

    def _save(self, step: int) -> None:
        assert self.model_dir is not None
        ckpt = tf.train.Checkpoint(model=self.model)
        chief = is_chief()
        remote = _remote(self.model_dir)
        if chief and not remote:
            os.makedirs(self.model_dir, exist_ok=True)
            d = self.model_dir
        else:
            d = tempfile.mkdtemp(prefix="loom-tf-ckpt-",
                                 dir=None if remote or not chief else self.model_dir)
        try:
            prefix = ckpt.write(os.path.join(d, f"ckpt-{step}"))
            name = os.path.basename(prefix)
            if not chief:
                return
            if remote:
                for f in sorted(os.listdir(d)):
                    _fs("put", "-f", os.path.join(d, f), f"{self.model_dir}/{f}")
            state = f'model_checkpoint_path: "{name}"\n'
            _write(self.model_dir, "checkpoint", state.encode())
            self._saved = (name, step)
        finally:
            if d != self.model_dir:
                shutil.rmtree(d, ignore_errors=True)


def evaluator(model_dir: str, evaluate: Callable[[str], Optional[Dict[str, float]]],
              poll: float = 0.5, timeout: Optional[float] = None,
              prefix: str = "eval/") -> List[Dict[str, Any]]:
    """The evaluator role's loop (tf-yarn's evaluator task): evaluate(path)
    for each new checkpoint in model_dir (local or hdfs://; path is a local
    checkpoint prefix for tf.train.Checkpoint.read) as it appears, the
    latest each time, until it has evaluated the one the chief's DONE
    marker names. The dict evaluate returns becomes loom metrics
    (prefix + name, at the checkpoint's step). Returns [{"checkpoint",
    "step", "metrics"}] in the order evaluated. Raises TimeoutError past
    timeout seconds without the end."""
    model_dir = model_dir.rstrip("/")
    lm: Any = None
    if os.environ.get("LOOM_COORD"):
        from .core import Loom
        lm = Loom()
    done: List[Dict[str, Any]] = []
    seen: Optional[str] = None
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        marker = _read(model_dir, DONE)
        last = json.loads(marker)["checkpoint"] if marker else None
        name = last or _latest(model_dir)
        if name and name != seen:
            metrics = _evaluate(model_dir, name, evaluate)
            step = _step_of(name)
            if lm is not None:
                for k, v in (metrics or {}).items():
                    lm.metric(prefix + k, step, float(v))
            done.append({"checkpoint": name, "step": step, "metrics": metrics})
            seen = name
        if last is not None and seen == last:
            return done
        if end is not None and time.monotonic() > end:
            raise TimeoutError(f"loom.tensorflow.evaluator: no {DONE} marker in {model_dir} "
                               f"after {timeout} s (evaluated {[d['checkpoint'] for d in done]})")
        time.sleep(poll)


def _evaluate(model_dir: str, name: str,
              evaluate: Callable[[str], Optional[Dict[str, float]]]) -> Optional[Dict[str, float]]:
    if not _remote(model_dir):
        return evaluate(os.path.join(model_dir, name))
    with tempfile.TemporaryDirectory(prefix="loom-tf-eval-") as d:
        listing = _fs("ls", model_dir).stdout.decode(errors="replace").split()
        for f in sorted({os.path.basename(x) for x in listing if f"/{name}." in x}):
            _fs("get", f"{model_dir}/{f}", os.path.join(d, f))
        return evaluate(os.path.join(d, name))
