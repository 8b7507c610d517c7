"""TensorFlowOnSpark's API on loom: `from loom.compat.tensorflowonspark
import TFCluster, TFNode` in place of `from tensorflowonspark import ...`.

TFCluster.run(sc, map_fun, tf_args, num_executors, num_ps, ...) runs
map_fun(tf_args, ctx) in a loom job whose tasks are Spark tasks of sc's
application (loom.spark): ctx is a TFNodeContext (job_name, task_index,
cluster_spec, ...), TF_CONFIG is set, and with InputMode.SPARK the data of
cluster.train(rdd) / cluster.inference(rdd) reaches TFNode.DataFeed
through loom's feed (loom.spark.train / inference), each input row given
back as the nested lists, tuples and numpy arrays it was."""
from . import TFCluster, TFNode, TFParallel
from .TFCluster import InputMode

__all__ = ["TFCluster", "TFNode", "TFParallel", "InputMode"]
