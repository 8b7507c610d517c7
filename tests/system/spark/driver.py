"""A Spark driver for tests/system/test_spark.py, run with the Spark
environment's python (scripts/setup-spark.sh):

    driver.py CONFIG.json

CONFIG: {"master": "spark://..." or "local-cluster[2,1,1024]", "conf": {key:
value}, "spec": a loom spec as a dict, "timeout": seconds or null, "raise_in":
seconds or null (an exception in the driver that long after run() starts)}.

Runs loom.spark.run(spark, spec) once and prints one line, RESULT <json>:
what run() returned or raised, the Spark application's id, and its jobs and
stages as Spark's REST API reports them after the run."""
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
    t0 = time.monotonic()
    try:
        r = loom.spark.run(spark, cfg["spec"], timeout=cfg.get("timeout"), echo=True)
        out.update(ok=r.ok, exit_code=r.exit_code, state=r.state, job=r.job_id,
                   stdout=r.stdout, stderr=r.stderr, spark_tasks=r.spark_tasks)
    except BaseException as e:  # noqa: B902 (KeyboardInterrupt too)
        out.update(error=type(e).__name__, message=str(e),
                   exit_code=getattr(e, "exit_code", None), job=getattr(e, "job", None),
                   trace=traceback.format_exc()[-2000:])
    out["elapsed_s"] = time.monotonic() - t0
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
