"""A TensorFlowOnSpark program written as its MNIST examples are
(examples/mnist/keras/mnist_spark.py and mnist_inference.py: argparse, a
SparkContext, TFCluster.run with InputMode.SPARK, a main_fun reading
TFNode.DataFeed in a loop until should_stop(), cluster.train(rdd, epochs),
cluster.shutdown(); inference through DataFeed(ctx.mgr, False) and
batch_results), with the one line changed that loom asks for:

    from loom.compat.tensorflowonspark import TFCluster, TFNode, TFParallel

The model is a softmax regression in numpy, not Keras: the Spark
environment of the tests has no TensorFlow (tests/system/test_tfos.py).
The data is Fashion-MNIST from Debian's dataset-fashion-mnist.

Prints RESULT <json> lines for the test: what each cluster did."""
import argparse
import gzip
import json
import os
import sys
import traceback

import numpy as np
from pyspark import SparkConf, SparkContext

from loom.compat.tensorflowonspark import TFCluster, TFNode, TFParallel

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name, n):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    if "images" in name:
        return np.frombuffer(data, np.uint8, n * 784, 16).reshape(n, 784)
    return np.frombuffer(data, np.uint8, n, 8)


def main_fun(args, ctx):
    """Each worker trains on what the feed gives it and saves its weights;
    returns what it saw (loom's Result.values reach the driver)."""
    w = np.zeros((784, 10))
    b = np.zeros(10)
    # averaged SGD: the mean of the iterates is the model (the last one
    # alone, at this step size, may sit after a bad batch: CI saw 0.46)
    aw, ab = np.zeros_like(w), np.zeros_like(b)
    tf_feed = TFNode.DataFeed(ctx.mgr)
    rows = steps = 0
    while not tf_feed.should_stop():
        batch = tf_feed.next_batch(args.batch_size)
        if len(batch) == 0:
            break
        x = np.array([r[0:-1] for r in batch], np.float64) / 255.0
        y = np.array([r[-1] for r in batch], np.int64)
        z = x @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        w -= args.lr * x.T @ p / len(y)
        b -= args.lr * p.mean(0)
        rows += len(batch)
        steps += 1
        aw += (w - aw) / steps
        ab += (b - ab) / steps
    model_dir = ctx.absolute_path(args.model_dir)
    path = model_dir[len("file://"):] if model_dir.startswith("file://") else model_dir
    os.makedirs(path, exist_ok=True)
    # the weights and how many rows made them (the feed's shares may be
    # uneven: inference weighs each worker's model by them)
    np.save(os.path.join(path, f"{ctx.job_name}-{ctx.task_index}.npy"),
            np.vstack([aw, ab, np.full(10, float(rows))]))
    return {"job_name": ctx.job_name, "task_index": ctx.task_index, "rows": rows,
            "steps": steps, "should_stop": tf_feed.should_stop(),
            "model": os.path.join(path, f"{ctx.job_name}-{ctx.task_index}.npy")}


def inference_fun(args, ctx):
    """The workers' weights averaged (weighed by the rows each read), applied to what the feed gives:
    one "label prediction" result per row."""
    import glob
    ws = [np.load(p) for p in sorted(glob.glob(os.path.join(args.model_path, "*.npy")))]
    wb = np.average([m[:785] for m in ws], axis=0, weights=[m[785, 0] + 1e-9 for m in ws])
    tf_feed = TFNode.DataFeed(ctx.mgr, False)
    while not tf_feed.should_stop():
        batch = tf_feed.next_batch(args.batch_size)
        if len(batch) == 0:
            break
        x = np.array([r[0] for r in batch], np.float64) / 255.0
        pred = np.argmax(x @ wb[:784] + wb[784], 1)
        tf_feed.batch_results([f"{int(r[1])} {int(p)}" for r, p in zip(batch, pred)])


def info_fun(args, ctx):
    """InputMode.TENSORFLOW: what each node is told."""
    if args.fail_in and f"{ctx.job_name}:{ctx.task_index}" == args.fail_in:
        raise RuntimeError(f"boom in {ctx.job_name}:{ctx.task_index}")
    return {"job_name": ctx.job_name, "task_index": ctx.task_index,
            "executor_id": ctx.executor_id, "num_workers": ctx.num_workers,
            "cluster": sorted(ctx.cluster_spec),
            "tf_config": json.loads(os.environ["TF_CONFIG"]),
            "abs": ctx.absolute_path("models/x"), "defaultFS": ctx.defaultFS}


def parallel_fun(args, ctx):
    """TFParallel: an independent instance per executor (parallel
    inference over a shard each, as TensorFlowOnSpark's examples do)."""
    with open(os.path.join(args.model_path, f"parallel-{ctx.worker_num}.json"), "w") as f:
        json.dump({"worker_num": ctx.worker_num, "executor_id": ctx.executor_id,
                   "num_workers": ctx.num_workers, "tf_config": "TF_CONFIG" in os.environ}, f)


def report(what, **kw):
    print("RESULT " + json.dumps({"what": what, **kw}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster_size", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--test_rows", type=int, default=1000)
    parser.add_argument("--model_dir", default="mnist_model")
    parser.add_argument("--fail_in", default="")
    args = parser.parse_args()

    sc = SparkContext(conf=SparkConf().setAppName("mnist_spark"))

    # TENSORFLOW mode: the nodes and their TF_CONFIG; then an exception
    cluster = TFCluster.run(sc, info_fun, args, args.cluster_size, 0,
                            input_mode=TFCluster.InputMode.TENSORFLOW, master_node="chief")
    cluster.shutdown()
    report("tensorflow", values=cluster.results[0].values)
    args.fail_in = "worker:0"
    cluster = TFCluster.run(sc, info_fun, args, args.cluster_size, 0, master_node="chief")
    try:
        cluster.shutdown()
        report("raise", error=None)
    except Exception as e:
        report("raise", error=type(e).__name__, message=str(e),
               remote=getattr(e, "traceback", ""))
    args.fail_in = ""
    for bad in ({"tensorboard": True}, {"driver_ps_nodes": True}):
        try:
            TFCluster.run(sc, info_fun, args, args.cluster_size, 0, **bad)
            report("refused", error=None)
        except ValueError as e:
            report("refused", error=str(e))

    # SPARK mode: training over an RDD of 785-number rows (image, label)
    images, labels = idx("train-images-idx3-ubyte.gz", args.rows), \
        idx("train-labels-idx1-ubyte.gz", args.rows)
    rows = [[float(v) for v in img] + [float(l)] for img, l in zip(images, labels)]
    dataRDD = sc.parallelize(rows, 4)
    cluster = TFCluster.run(sc, main_fun, args, args.cluster_size, 0,
                            input_mode=TFCluster.InputMode.SPARK)
    cluster.train(dataRDD, args.epochs)
    cluster.shutdown()
    report("train", values=cluster.results[0].values)

    # inference: (image array, label) tuples; results back as an RDD
    timg, tlab = idx("t10k-images-idx3-ubyte.gz", args.test_rows), \
        idx("t10k-labels-idx1-ubyte.gz", args.test_rows)
    args.model_path = os.path.join(os.getcwd(), args.model_dir)
    testRDD = sc.parallelize([(img, int(l)) for img, l in zip(timg, tlab)], 4)
    cluster = TFCluster.run(sc, inference_fun, args, args.cluster_size, 0,
                            input_mode=TFCluster.InputMode.SPARK)
    out = cluster.inference(testRDD).collect()
    cluster.shutdown()
    report("inference", results=out, labels=[int(l) for l in tlab])

    TFParallel.run(sc, parallel_fun, args, args.cluster_size)
    report("parallel", nodes=[json.load(open(os.path.join(args.model_path, f"parallel-{i}.json")))
                              for i in range(args.cluster_size)])
    sc.stop()
