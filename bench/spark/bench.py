"""bench/spark's driver: loom.spark and TensorFlowOnSpark 2.2.5 on one
SparkSession (local-cluster[2,1,1024]: 2 executors of 1 core), side by
side, interleaved (the order alternates from round to round). Run by
run.sh with .venv-tfos/bin/python; prints the figure lines on stdout,
progress on stderr.

    bench.py WORKDIR

Environment: BENCH_ROUNDS (start rounds, default 5), BENCH_FEED_ROUNDS
(default 1), BENCH_INFER_ROUNDS (default 1), BENCH_FEED_ROWS (default
60000), BENCH_EPOCHS (default 5), BENCH_INFER_ROWS (default 10000),
BENCH_PARTITIONS (default 4), BENCH_FIGURES (default "start feed infer"),
BENCH_PEERS (default "loom tfos")."""
import glob
import gzip
import json
import os
import re
import statistics
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.abspath(sys.argv[1])
PY = sys.executable
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
FEED_ROUNDS = int(os.environ.get("BENCH_FEED_ROUNDS", "1"))
INFER_ROUNDS = int(os.environ.get("BENCH_INFER_ROUNDS", "1"))
FEED_ROWS = int(os.environ.get("BENCH_FEED_ROWS", "60000"))
EPOCHS = int(os.environ.get("BENCH_EPOCHS", "5"))
INFER_ROWS = int(os.environ.get("BENCH_INFER_ROWS", "10000"))
PARTS = int(os.environ.get("BENCH_PARTITIONS", "4"))
FIGURES = os.environ.get("BENCH_FIGURES", "start feed infer").split()
PEERS = os.environ.get("BENCH_PEERS", "loom tfos").split()
REC = 785


def say(*a):
    print("bench/spark:", *a, file=sys.stderr, flush=True)


def fig(**kv):
    print(" ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def fashion(spark, n, partitions):
    """The first n Fashion-MNIST training rows as a DataFrame (image: 784
    bytes, label: a byte), the sum of every byte of them, and each row's
    "label,image byte sum" line, sorted."""
    import numpy as np
    import pandas as pd
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(f"{d}/train-images-idx3-ubyte.gz") as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:n]
    with gzip.open(f"{d}/train-labels-idx1-ubyte.gz") as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    assert len(img) == n, f"Fashion-MNIST has {len(img)} training rows, not {n}"
    pdf = pd.DataFrame({"image": [r.tobytes() for r in img], "label": lab.astype(np.int8)})
    df = spark.createDataFrame(pdf, "image binary, label byte").repartition(partitions).cache()
    df.count()  # both sides read the same cached partitions
    sums = img.sum(axis=1, dtype=np.uint64)
    return df, {"rows": n, "sum": int(img.sum(dtype=np.uint64) + lab.sum(dtype=np.uint64)),
                "lines": sorted(f"{int(l)},{int(s)}" for l, s in zip(lab, sums))}


def loom_spec(name, command):
    return {"name": name, "env": {"PYTHONPATH": os.path.join(ROOT, "python"),
                                  "LOOM_BIN": os.environ["LOOM_BIN"]},
            "roles": {"worker": {"instances": 2, "command": command}}}


# ---- TFoS map_funs (shipped to the executors by value) -------------------------

def tfos_start_fun(args, ctx):
    import time as _t
    with open(f"{args['dir']}/start-{ctx.executor_id}", "w") as f:
        f.write(repr(_t.time()))


def tfos_count_fun(args, ctx):
    import numpy as _np
    from tensorflowonspark import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=True)
    rows, total = 0, 0
    while not feed.should_stop():
        batch = feed.next_batch(512)
        if not batch:
            continue
        for img, label in batch:
            total += int(_np.frombuffer(img, _np.uint8).sum(dtype=_np.uint64)) + (label & 0xFF)
        rows += len(batch)
    with open(f"{args['dir']}/count-{ctx.executor_id}", "w") as f:
        f.write(f"{rows} {total}")


def tfos_infer_fun(args, ctx):
    import numpy as _np
    from tensorflowonspark import TFNode
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        batch = feed.next_batch(256)
        if not batch:
            continue
        feed.batch_results([f"{label & 0xFF},{int(_np.frombuffer(img, _np.uint8).sum(dtype=_np.uint64))}"
                            for img, label in batch])


# ---- the figures --------------------------------------------------------------

def loom_start(spark, rnd):
    import loom.spark
    spec = loom_spec(f"bstart{rnd}", "echo BENCHSTART $(date +%s.%N)")
    t0 = time.time()
    r = loom.spark.run(spark, spec, echo=False, timeout=300)
    t1 = time.time()
    if not r.ok:
        raise RuntimeError(f"loom job failed: {r.stderr[-2000:]}")
    ts = [float(x) for x in re.findall(r"BENCHSTART (\d+\.\d+)", r.stdout)]
    if len(ts) != 2:
        raise RuntimeError(f"loom: {len(ts)} start times, not 2:\n{r.stdout}")
    return {"running": max(ts) - t0, "end": t1 - t0}


def tfos_start(spark, rnd, mode):
    from tensorflowonspark import TFCluster
    sc = spark.sparkContext
    d = os.path.join(WORK, f"tfos-start-{mode}-{rnd}")
    os.makedirs(d)
    im = TFCluster.InputMode.TENSORFLOW if mode == "tensorflow" else TFCluster.InputMode.SPARK
    t0 = time.time()
    cluster = TFCluster.run(sc, tfos_start_fun, {"dir": d}, num_executors=2, num_ps=0,
                            input_mode=im, master_node=None)
    t_ret = time.time()
    deadline = t_ret + 120
    while len(glob.glob(f"{d}/start-*")) < 2 and time.time() < deadline:
        time.sleep(0.01)
    files = glob.glob(f"{d}/start-*")
    if len(files) != 2:
        raise RuntimeError(f"tfos: map_fun started on {len(files)} executors, not 2")
    ts = [float(open(f).read()) for f in files]
    cluster.shutdown(timeout=120)
    return {"returned": t_ret - t0, "running": max(ts) - t0, "end": time.time() - t0}


def loom_feed(spark, df, facts):
    import loom.spark
    spec = loom_spec("bfeed", f"{PY} {HERE}/loom_task.py count")
    t0 = time.time()
    r = loom.spark.train(spark, df, spec, epochs=EPOCHS, echo=False, timeout=1800)
    el = time.time() - t0
    if not r.ok:
        raise RuntimeError(f"loom job failed: {r.stderr[-2000:]}")
    got = re.findall(r"BENCHFEED task=\S+ rows=(\d+) sum=(\d+)", r.stdout)
    return el, sum(int(a) for a, _ in got), sum(int(b) for _, b in got), len(got)


def tfos_feed(spark, df, facts, rnd):
    from tensorflowonspark import TFCluster
    sc = spark.sparkContext
    d = os.path.join(WORK, f"tfos-feed-{rnd}")
    os.makedirs(d)
    rdd = df.rdd.map(lambda r: (bytes(r.image), int(r.label)))
    t0 = time.time()
    cluster = TFCluster.run(sc, tfos_count_fun, {"dir": d}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, master_node=None)
    cluster.train(rdd, num_epochs=EPOCHS, feed_timeout=1800)
    el = time.time() - t0
    cluster.shutdown(timeout=300)
    got = [open(f).read().split() for f in glob.glob(f"{d}/count-*")]
    return el, sum(int(a) for a, _ in got), sum(int(b) for _, b in got), len(got)


def loom_infer(spark, df, facts):
    import loom.spark
    spec = loom_spec("binfer", f"{PY} {HERE}/loom_task.py infer")
    t0 = time.time()
    out = loom.spark.inference(spark, df, spec, spill_dir=os.path.join(WORK, "loom-infer"),
                               echo=False, timeout=1800)
    lines = [r.value for r in out.collect()]
    el = time.time() - t0
    import shutil
    shutil.rmtree(os.path.join(WORK, "loom-infer"), ignore_errors=True)
    return el, sorted(lines)


def tfos_infer(spark, df, facts):
    from tensorflowonspark import TFCluster
    sc = spark.sparkContext
    rdd = df.rdd.map(lambda r: (bytes(r.image), int(r.label)))
    t0 = time.time()
    cluster = TFCluster.run(sc, tfos_infer_fun, {}, num_executors=2, num_ps=0,
                            input_mode=TFCluster.InputMode.SPARK, master_node=None)
    lines = cluster.inference(rdd, feed_timeout=1800).collect()
    el = time.time() - t0
    cluster.shutdown(timeout=300)
    return el, sorted(lines)


def warm(spark, what):
    """A warm-up run of each side on 1,000 rows, not counted: the executors'
    python workers for mapInArrow (loom's spill) and for RDD maps (TFoS's
    feeding) are started and have imported what they use."""
    global EPOCHS
    df, facts = fashion(spark, 1000, PARTS)
    keep, EPOCHS = EPOCHS, 1
    try:
        for p in PEERS:
            t0 = time.time()
            if what == "feed":
                loom_feed(spark, df, facts) if p == "loom" else tfos_feed(spark, df, facts, "warm")
            else:
                loom_infer(spark, df, facts) if p == "loom" else tfos_infer(spark, df, facts)
            say(f"{what} warm-up {p}: {time.time() - t0:.2f} s (not counted)")
    finally:
        EPOCHS = keep
        df.unpersist()


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    from pyspark.sql import SparkSession
    os.makedirs(WORK, exist_ok=True)
    b = SparkSession.builder.master("local-cluster[2,1,1024]").appName("loom-bench-spark")
    conf = {"spark.driver.host": "127.0.0.1", "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "spark.executorEnv.LOOM_BIN": os.environ["LOOM_BIN"],
            # TFoS finds an executor's TFManager through the python worker
            # that reserved it: keep workers (Spark's default, stated)
            "spark.python.worker.reuse": "true",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.task.maxFailures": "1",
            # what a deployment states; loom.spark.slots() then counts the
            # executors at once instead of waiting 1 s for their number to
            # hold still (local-cluster[2,...] has 2 either way)
            "spark.executor.instances": "2"}
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    import loom.spark
    say("executors:", loom.spark.slots(sc, 60)["how"])
    failed = []

    # ---- 1. start ----
    if "start" in FIGURES:
        res = {"loom": [], "tfos_tensorflow": [], "tfos_spark": []}
        peers = [p for p in ("loom", "tfos_tensorflow", "tfos_spark")
                 if p.split("_")[0] in PEERS]
        errors = {}
        for rnd in range(-1, ROUNDS):  # round -1: a warm-up, not counted
            order = peers if rnd % 2 == 0 else peers[::-1]
            for p in order:
                if p in errors:
                    continue
                try:
                    r = loom_start(spark, rnd) if p == "loom" else tfos_start(
                        spark, rnd, p.split("_")[1])
                    say(f"start round {rnd} {p}: {json.dumps(r)}")
                    if rnd >= 0:
                        res[p].append(r)
                except Exception as e:  # noqa: BLE001
                    errors[p] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    say(f"start {p} FAILED: {traceback.format_exc()[-3000:]}")
        lm = med([r["running"] for r in res["loom"]])
        fig(name="spark_start_running", peer="loom", n=2, rounds=len(res["loom"]),
            median_s=f"{lm:.3f}")
        for p in ("tfos_tensorflow", "tfos_spark"):
            if p not in peers:
                continue
            if p in errors:
                fig(name="spark_start_running", peer=p, n=2, error=json.dumps(errors[p]))
                failed.append(p)
                continue
            for what in ("running", "returned"):
                m = med([r[what] for r in res[p]])
                fig(name=f"spark_start_{what}", peer=p, n=2, rounds=len(res[p]),
                    median_s=f"{m:.3f}", ratio=f"{m / lm:.2f}", target=3)

    # ---- 2. feed ----
    if "feed" in FIGURES:
        df, facts = fashion(spark, FEED_ROWS, PARTS)
        want_rows, want_sum = FEED_ROWS * EPOCHS, facts["sum"] * EPOCHS
        res = {"loom": [], "tfos": []}
        warm(spark, "feed")
        for rnd in range(FEED_ROUNDS):
            for p in (PEERS if rnd % 2 == 0 else PEERS[::-1]):
                try:
                    el, rows, total, tasks = (loom_feed(spark, df, facts) if p == "loom"
                                              else tfos_feed(spark, df, facts, rnd))
                except Exception:  # noqa: BLE001
                    say(f"feed {p} FAILED: {traceback.format_exc()[-3000:]}")
                    fig(name="spark_feed", peer=p, n=want_rows, error="failed (see stderr)")
                    failed.append(f"feed-{p}")
                    continue
                ok = rows == want_rows and total == want_sum and tasks == 2
                say(f"feed round {rnd} {p}: {el:.2f} s, {tasks} tasks, rows {rows} (want "
                    f"{want_rows}), sum {total} (want {want_sum})")
                if not ok:
                    say(f"!!! feed {p}: MISMATCH: rows {rows} sum {total} tasks {tasks}, want "
                        f"rows {want_rows} sum {want_sum} tasks 2")
                    fig(name="spark_feed", peer=p, n=want_rows, MISMATCH=f"rows={rows},sum={total}")
                    failed.append(f"feed-{p}")
                    continue
                res[p].append(el)
        lm = med(res["loom"])
        for p in PEERS:
            if not res[p]:
                continue
            m = med(res[p])
            fig(name="spark_feed", peer=p, n=want_rows, epochs=EPOCHS, rows=FEED_ROWS,
                bytes=want_rows * REC, rounds=len(res[p]), median_s=f"{m:.3f}",
                rows_per_s=f"{want_rows / m:.0f}", checksum="match",
                **({"ratio": f"{m / lm:.2f}", "target": 10} if p != "loom" and res["loom"]
                   else {}))
        df.unpersist()

    # ---- 3. inference ----
    if "infer" in FIGURES:
        df, facts = fashion(spark, INFER_ROWS, PARTS)
        res = {"loom": [], "tfos": []}
        warm(spark, "infer")
        for rnd in range(INFER_ROUNDS):
            for p in (PEERS if rnd % 2 == 0 else PEERS[::-1]):
                try:
                    el, lines = (loom_infer(spark, df, facts) if p == "loom"
                                 else tfos_infer(spark, df, facts))
                except Exception:  # noqa: BLE001
                    say(f"infer {p} FAILED: {traceback.format_exc()[-3000:]}")
                    fig(name="spark_inference", peer=p, n=INFER_ROWS, error="failed (see stderr)")
                    failed.append(f"infer-{p}")
                    continue
                ok = lines == facts["lines"]
                say(f"infer round {rnd} {p}: {el:.2f} s, {len(lines)} results, "
                    f"{'match' if ok else 'MISMATCH'}")
                if not ok:
                    say(f"!!! infer {p}: MISMATCH: {len(lines)} lines, want {INFER_ROWS}")
                    fig(name="spark_inference", peer=p, n=INFER_ROWS,
                        MISMATCH=f"lines={len(lines)}")
                    failed.append(f"infer-{p}")
                    continue
                res[p].append(el)
        lm = med(res["loom"])
        for p in PEERS:
            if not res[p]:
                continue
            m = med(res[p])
            fig(name="spark_inference", peer=p, n=INFER_ROWS, bytes=INFER_ROWS * REC,
                rounds=len(res[p]), median_s=f"{m:.3f}", rows_per_s=f"{INFER_ROWS / m:.0f}",
                results="match",
                **({"ratio": f"{m / lm:.2f}"} if p != "loom" and res["loom"] else {}))
        df.unpersist()

    spark.stop()
    if failed:
        say("failed:", " ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
