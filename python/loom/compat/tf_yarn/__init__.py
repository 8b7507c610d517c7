"""tf-yarn's API on loom: `from loom.compat.tf_yarn.pytorch import
run_on_yarn, PytorchExperiment, DataLoaderArgs, TaskSpec, NodeLabel` in
place of `from tf_yarn.pytorch import ...`.

run_on_yarn runs the experiment in a loom job on YARN (loom.run(fn,
backend="yarn")): each task_specs entry a role, each task calling
experiment_fn() and training as tf-yarn's worker does. What it honours and
refuses is in docs/python.md, "Programs written for tf-yarn". tf-yarn's
TensorFlow side (tf.estimator Experiments, KerasExperiment) is not here:
TensorFlow 2.16 and later have no tf.estimator."""
from .client import Metrics, RunFailed, get_safe_experiment_fn
from .topologies import NodeLabel, TaskSpec, single_server_topology

__all__ = ["Metrics", "RunFailed", "get_safe_experiment_fn", "NodeLabel", "TaskSpec",
           "single_server_topology"]
