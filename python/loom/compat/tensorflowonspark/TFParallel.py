"""TensorFlowOnSpark's TFParallel on loom: map_fn(tf_args, ctx) as
num_executors independent instances (parallel inference, a model per
shard), each a task of a loom job in sc's application (loom.spark.run, a
barrier stage whatever use_barrier says). Each instance is alone: no
TF_CONFIG (TensorFlow sees one node), ctx.worker_num / executor_id its
index, ctx.num_workers the instances. Waits; a task's exception raises
loom.TaskError with its traceback."""
import os
from typing import Any, Callable


def run(sc: Any, map_fn: Callable[..., Any], tf_args: Any, num_executors: int,
        use_barrier: bool = True) -> None:
    from ... import spark
    from .TFCluster import _default_fs, _node
    sc = getattr(sc, "sparkContext", sc)
    if num_executors < 1:
        raise ValueError(f"TFParallel.run: num_executors={num_executors}: at least 1")
    meta = {"order": [("worker", num_executors)], "default_fs": _default_fs(sc),
            "working_dir": os.getcwd(), "num_workers": num_executors, "parallel": True}
    spark.run(sc, _node, args=(map_fn, tf_args, meta, None), num_workers=num_executors,
              name="tfparallel")
