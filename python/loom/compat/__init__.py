"""Drop-in modules for programs written for peers that are no longer
maintained: change one import and the program runs on loom.

- loom.compat.tensorflowonspark: TensorFlowOnSpark's TFCluster and TFNode
  (`from loom.compat.tensorflowonspark import TFCluster, TFNode`).

What each honours, and what it refuses (by name, before anything starts),
is in docs/python.md, "Programs written for TensorFlowOnSpark"."""
