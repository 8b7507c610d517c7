"""A Spark driver for tests/system/test_spark.py, run with the Spark
environment's python (scripts/setup-spark.sh):

    driver.py CONFIG.json

CONFIG: {"master": "spark://..." or "local-cluster[2,1,1024]", "conf": {key:
value}, "spec": a loom spec as a dict, "timeout": seconds or null, "raise_in":
seconds or null (an exception in the driver that long after run() starts),
"mode": "run" (default), "train", "inference", "fn" (loom.spark.run of a
function: fn_of; "scale", "offset", "fail_task", "num_workers", "retries"),
"train_fn" or "inference_fn" (train and inference of a function over an
RDD: rdd_job), "rows": how many
Fashion-MNIST training rows the DataFrame of train and inference has,
"partitions": its partitions, "epochs": train's, "stream", "ahead",
"spill_dir": train's and inference's arguments (spill_dir is watched: the
most bytes of part files it held is reported as spill_peak),
"slow_partition_s": seconds each partition of the DataFrame takes to
compute, "bad_width_partition": a partition whose images are 783 bytes,
"home": the run's LOOM_HOME, "raise_when_running": an exception in the driver
once the job is running}; or {"runs": [CONFIG, ...]}: each run in turn, in
one application while master and conf stay the same (saves a driver and
its executors' start for cases that do not interfere).

Runs loom.spark.run(spark, spec) (or train, inference) and prints one line
a run, RESULT <json>: what it returned or raised, the Spark application's id,
and its jobs and stages as Spark's REST API reports them after the run; for
train and inference also what the DataFrame holds (rows, the sum
of every byte of its 785-byte records, its labels' counts and its image
byte sums, as the driver computed them from the files)."""
import gzip
import json
import os
import sys
import threading
import time
import traceback
import urllib.request

from pyspark.sql import SparkSession

import loom
import loom.spark


def rest(sc, what):
    """Spark's REST API: tried again for 60 s (a loaded machine's UI once
    took more than the 10 s of one try)."""
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{what}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def slowed(df, seconds, bad):
    """df, each partition taking seconds longer to compute; partition bad
    (>= 0) with 783-byte images."""
    def f(batches):
        import time as _t

        import pyarrow as pa
        from pyspark import TaskContext
        _t.sleep(seconds)
        short = TaskContext.get().partitionId() == bad
        for b in batches:
            if short:
                img = pa.array([v[:783] for v in b.column(0).to_pylist()], pa.binary())
                b = pa.RecordBatch.from_arrays([img, b.column(1)], schema=b.schema)
            yield b
    return df.mapInArrow(f, df.schema)


def watch(path, box):
    """Samples the bytes of part files in path until box["stop"]."""
    from pathlib import Path
    while not box.get("stop"):
        n = 0
        for p in Path(path).glob("part-*.rec"):
            try:
                n += p.stat().st_size
            except OSError:
                pass
        box["peak"] = max(box.get("peak", 0), n)
        time.sleep(0.005)


def fashion(spark, n, partitions):
    """The first n Fashion-MNIST training rows as a DataFrame (image: 784
    bytes, label: a byte), and what it holds."""
    import numpy as np
    import pandas as pd
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/train-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(f"{d}/train-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    pdf = pd.DataFrame({"image": [r.tobytes() for r in img], "label": lab.astype(np.int8)})
    df = spark.createDataFrame(pdf, "image binary, label byte").repartition(partitions)
    sums = img.sum(axis=1, dtype=np.uint64)
    facts = {"rows": int(n), "sum": int(img.sum(dtype=np.uint64) + lab.sum(dtype=np.uint64)),
             "lines": sorted(f"{int(l)},{int(s)}" for l, s in zip(lab, sums))}
    return df, facts


def in_executor():
    """Whether a Spark executor (CoarseGrainedExecutorBackend) is among
    this process's ancestors."""
    pid = os.getppid()
    while pid > 1:
        try:
            if b"CoarseGrainedExecutorBackend" in open(f"/proc/{pid}/cmdline", "rb").read():
                return True
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def fn_of(cfg):
    """mode "fn": the function loom.spark.run(spark, fn) ships, defined
    here in __main__ and closing over a local (cloudpickle takes it by
    value, as from a notebook cell). "fail_task": the task that raises."""
    scale, fail = cfg.get("scale", 1), cfg.get("fail_task")

    def task_fn(offset):
        task = os.environ["LOOM_TASK"]
        if task == fail:
            raise ValueError(f"boom in {task}")
        return {"task": task, "value": scale * (int(os.environ["LOOM_INDEX"]) + 1) + offset,
                "in_executor": in_executor()}
    return task_fn


def rdd_job(spark, cfg):
    """modes "train_fn" and "inference_fn": an RDD and the function that
    reads it from the feed. train_fn: "rows" rows ([i/2, i/4, 1.0], i % 10)
    (a list and a label, as TensorFlowOnSpark programs feed them: 32-byte
    records, three doubles and a long); each task returns how many records
    it read and their numbers' sum. inference_fn: "rows" 2-byte records;
    each task writes "a,b" a record. Also what the driver expects."""
    sc = spark.sparkContext
    n, parts = cfg["rows"], cfg.get("partitions", 4)
    if cfg["mode"] == "train_fn":
        rdd = sc.parallelize([([i / 2, i / 4, 1.0], i % 10) for i in range(n)], parts)

        def fn(scale):
            import struct
            got, total = 0, 0.0
            with loom.Feed() as f:
                for rec in f:
                    a, b, c, label = struct.unpack("<dddq", rec)
                    got += 1
                    total += scale * (a + b + c + label)
            return {"rows": got, "sum": total}
        return rdd, fn, sum(i / 2 + i / 4 + 1.0 + i % 10 for i in range(n))
    rdd = sc.parallelize([bytes([i % 256, (i * 7) % 256]) for i in range(n)], parts)

    def infer():
        with loom.Feed() as f:
            for rec in f:
                f.write(f"{rec[0]},{rec[1]}\n")
    return rdd, infer, sorted(f"{i % 256},{(i * 7) % 256}" for i in range(n))


def session(cfg):
    b = SparkSession.builder.master(cfg["master"]).appName(cfg.get("app", "loom-test"))
    # a barrier stage Spark cannot place yet (a lost executor's replacement
    # still starting) is tried again after this interval (Spark's default:
    # 15 s)
    # the JVMs of a test's short application: the quick JIT tier alone and
    # the serial collector (as scripts/yarn-cluster.sh runs Hadoop's), less
    # CPU for compiling code that runs for seconds on a 2-core machine
    fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    conf = {"spark.driver.extraJavaOptions": fast, "spark.executor.extraJavaOptions": fast,
            "spark.yarn.am.extraJavaOptions": fast,
            "spark.driver.host": "127.0.0.1", "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s"}
    conf.update(cfg.get("conf", {}))
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def interrupt_when_running(home, box):
    """KeyboardInterrupt in the main thread (as from Ctrl-C) once the job
    of LOOM_HOME home is running (`loom status --json`), not before."""
    import _thread
    deadline = time.monotonic() + 240
    while not box.get("stop") and time.monotonic() < deadline:
        try:
            if loom.status("last", home=home)["state"] == "running":
                _thread.interrupt_main()
                return
        except (loom.LoomError, KeyError):
            pass
        time.sleep(0.1)


def one(spark, cfg):
    """Runs cfg's run (or train, inference) in the application of spark."""
    sc = spark.sparkContext
    out = {"app": sc.applicationId}
    box = {}
    if cfg.get("raise_in"):
        # an exception in the driver while run() waits: the main thread gets
        # KeyboardInterrupt, as from Ctrl-C
        import _thread
        threading.Timer(cfg["raise_in"], _thread.interrupt_main).start()
    if cfg.get("raise_when_running"):
        threading.Thread(target=interrupt_when_running,
                         args=(cfg.get("home") or os.environ["LOOM_HOME"], box),
                         daemon=True).start()
    mode = cfg.get("mode", "run")
    if mode in ("train", "inference"):
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        df, facts = fashion(spark, cfg["rows"], cfg.get("partitions", 4))
        if cfg.get("slow_partition_s") or cfg.get("bad_width_partition") is not None:
            df = slowed(df, cfg.get("slow_partition_s", 0), cfg.get("bad_width_partition", -1))
        out["data"] = facts
    kw = {k: cfg[k] for k in ("stream", "ahead", "spill_dir", "home") if k in cfg}
    if cfg.get("spill_dir") and not cfg["spill_dir"].startswith("hdfs://"):
        os.makedirs(cfg["spill_dir"], exist_ok=True)
        threading.Thread(target=watch, args=(cfg["spill_dir"], box), daemon=True).start()
    t0 = time.monotonic()
    try:
        if mode == "inference":
            res = loom.spark.inference(spark, df, cfg["spec"], timeout=cfg.get("timeout"), **kw)
            out["lines"] = sorted(r.value for r in res.collect())
            # the output stays for the DataFrame; the test is done with it
            # and removes what docs/spark.md says is the caller's: the
            # directory of res.inputFiles()
            import shutil
            from pathlib import Path
            for f in res.inputFiles()[:1]:
                if f.startswith("hdfs://"):
                    import subprocess
                    subprocess.run([os.environ["LOOM_BIN"], "fs", "rm", "-r",
                                    f.rsplit("/", 1)[0]], check=True)
                else:
                    shutil.rmtree(Path(f.removeprefix("file:")).parent)
            out.update(exit_code=0)
        else:
            if mode in ("train_fn", "inference_fn"):
                rdd, fn, out["expect"] = rdd_job(spark, cfg)
                if mode == "train_fn":
                    r = loom.spark.train(spark, rdd, fn, args=(1.0,), num_workers=2,
                                         timeout=cfg.get("timeout"), **kw)
                    out.update(values=r.values, job=r.job_id)
                else:
                    res = loom.spark.inference(spark, rdd, fn, num_workers=2,
                                               timeout=cfg.get("timeout"), **kw)
                    out["lines"] = sorted(r.value for r in res.collect())
                out.update(ok=True, exit_code=0)
                return finish(sc, out, box, t0)
            if mode == "fn":
                r = loom.spark.run(spark, fn_of(cfg), args=(cfg.get("offset", 0),),
                                   num_workers=cfg.get("num_workers"),
                                   retries=cfg.get("retries"),
                                   timeout=cfg.get("timeout"), **kw)
                out.update(ok=r.ok, exit_code=r.exit_code, state=r.state, job=r.job_id,
                           values=r.values, stdout=r.stdout, spark_tasks=r.spark_tasks)
                return finish(sc, out, box, t0)
            if mode == "train":
                r = loom.spark.train(spark, df, cfg["spec"], epochs=cfg.get("epochs", 1),
                                     timeout=cfg.get("timeout"), **kw)
                out["spill"] = r.spill
            else:
                r = loom.spark.run(spark, cfg["spec"], timeout=cfg.get("timeout"), echo=True,
                                   **kw)
            out.update(ok=r.ok, exit_code=r.exit_code, state=r.state, job=r.job_id,
                       stdout=r.stdout, stderr=r.stderr, spark_tasks=r.spark_tasks)
    except BaseException as e:  # noqa: B902 (KeyboardInterrupt too)
        out.update(error=type(e).__name__, message=str(e),
                   exit_code=getattr(e, "exit_code", None), job=getattr(e, "job", None),
                   trace=traceback.format_exc()[-2000:])
        if isinstance(e, loom.TaskError):
            out.update(task=e.task, remote_traceback=e.traceback, job=e.job_id)
    return finish(sc, out, box, t0)


def finish(sc, out, box, t0):
    """out with the run's time, the spill's peak and Spark's jobs and
    stages as its REST API has them."""
    out["elapsed_s"] = time.monotonic() - t0
    box["stop"] = True
    if "peak" in box:
        out["spill_peak"] = box["peak"]
    try:
        out["spark_jobs"] = [{"id": j["jobId"], "status": j["status"], "group": j.get("jobGroup")}
                             for j in rest(sc, "jobs")]
        out["spark_stages"] = [{"id": s["stageId"], "attempt": s["attemptId"],
                                "tasks": s["numTasks"], "status": s["status"],
                                "name": s.get("name", "")} for s in rest(sc, "stages")]
    except OSError as e:
        out["rest_error"] = str(e)
    return out


def main():
    cfg = json.load(open(sys.argv[1]))
    # "runs": several runs one after another, in one application while
    # their master and conf are the same (a new one where they change)
    runs = cfg.get("runs") or [cfg]
    spark, key = None, None
    for i, run in enumerate(runs):
        k = (run["master"], json.dumps(run.get("conf", {}), sort_keys=True))
        if spark is None or k != key:
            if spark is not None:
                spark.stop()
            spark, key = session(run), k
        out = one(spark, run)
        if i == len(runs) - 1:
            spark.stop()
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
