"""A Spark driver for tests/system/test_spark.py, run with the Spark
environment's python (scripts/setup-spark.sh):

    driver.py CONFIG.json

CONFIG: {"master": "spark://..." or "local-cluster[2,1,1024]", "conf": {key:
value}, "spec": a loom spec as a dict, "timeout": seconds or null, "raise_in":
seconds or null (an exception in the driver that long after run() starts),
"mode": "run" (default), "train" or "inference", "rows": how many
Fashion-MNIST training rows the DataFrame of train and inference has,
"partitions": its partitions, "epochs": train's, "stream", "ahead",
"spill_dir": train's and inference's arguments (spill_dir is watched: the
most bytes of part files it held is reported as spill_peak),
"slow_partition_s": seconds each partition of the DataFrame takes to
compute, "bad_width_partition": a partition whose images are 783 bytes}.

Runs loom.spark.run(spark, spec) (or train, inference) once and prints one
line, RESULT <json>: what it returned or raised, the Spark application's
id, and its jobs and stages as Spark's REST API reports them after the
run; for train and inference also what the DataFrame holds (rows, the sum
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
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/{what}"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


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


def main():
    cfg = json.load(open(sys.argv[1]))
    b = SparkSession.builder.master(cfg["master"]).appName(cfg.get("app", "loom-test"))
    conf = {"spark.driver.host": "127.0.0.1", "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    conf.update(cfg.get("conf", {}))
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    out = {"app": sc.applicationId}
    if cfg.get("raise_in"):
        # an exception in the driver while run() waits: the main thread gets
        # KeyboardInterrupt, as from Ctrl-C
        import _thread
        threading.Timer(cfg["raise_in"], _thread.interrupt_main).start()
    mode = cfg.get("mode", "run")
    if mode != "run":
        spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
        df, facts = fashion(spark, cfg["rows"], cfg.get("partitions", 4))
        if cfg.get("slow_partition_s") or cfg.get("bad_width_partition") is not None:
            df = slowed(df, cfg.get("slow_partition_s", 0), cfg.get("bad_width_partition", -1))
        out["data"] = facts
    kw = {k: cfg[k] for k in ("stream", "ahead", "spill_dir") if k in cfg}
    box = {}
    if cfg.get("spill_dir") and not cfg["spill_dir"].startswith("hdfs://"):
        os.makedirs(cfg["spill_dir"], exist_ok=True)
        threading.Thread(target=watch, args=(cfg["spill_dir"], box), daemon=True).start()
    t0 = time.monotonic()
    try:
        if mode == "inference":
            res = loom.spark.inference(spark, df, cfg["spec"], timeout=cfg.get("timeout"), **kw)
            out["lines"] = sorted(r.value for r in res.collect())
            # the output stays for the DataFrame; the test is done with it
            import shutil
            from pathlib import Path
            for f in res.inputFiles()[:1]:
                if f.startswith("hdfs://"):
                    import subprocess
                    subprocess.run([os.environ["LOOM_BIN"], "fs", "rm", "-r",
                                    f.rsplit("/", 1)[0]], check=True)
                else:
                    shutil.rmtree(Path(f.removeprefix("file:")).parent.parent)
            out.update(exit_code=0)
        else:
            if mode == "train":
                r = loom.spark.train(spark, df, cfg["spec"], epochs=cfg.get("epochs", 1),
                                     timeout=cfg.get("timeout"), **kw)
                out["spill"] = r.spill
            else:
                r = loom.spark.run(spark, cfg["spec"], timeout=cfg.get("timeout"), echo=True)
            out.update(ok=r.ok, exit_code=r.exit_code, state=r.state, job=r.job_id,
                       stdout=r.stdout, stderr=r.stderr, spark_tasks=r.spark_tasks)
    except BaseException as e:  # noqa: B902 (KeyboardInterrupt too)
        out.update(error=type(e).__name__, message=str(e),
                   exit_code=getattr(e, "exit_code", None), job=getattr(e, "job", None),
                   trace=traceback.format_exc()[-2000:])
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
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
