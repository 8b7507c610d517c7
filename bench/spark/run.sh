#!/usr/bin/env bash
# bench/spark/run.sh: loom.spark next to TensorFlowOnSpark 2.2.5 on the same
# Spark (pyspark 4.3.0, local-cluster[2,1,1024]: 2 executors of 1 core, one
# SparkSession for both), in one run, interleaved. See README.md.
#
#   name=spark_start_running  peer=loom|tfos_tensorflow|tfos_spark n=2 rounds=.. median_s=.. [ratio=.. target=3]
#   name=spark_start_returned peer=tfos_tensorflow|tfos_spark n=2 rounds=.. median_s=.. ratio=.. target=3
#   name=spark_feed      peer=loom|tfos n=<rows x epochs> epochs=5 rows=60000 bytes=.. median_s=.. rows_per_s=.. [ratio=.. target=10]
#   name=spark_inference peer=loom|tfos n=10000 bytes=.. median_s=.. rows_per_s=.. [ratio=..]
#
# ratio = TFoS's median / loom's (> 1: loom is better). A measurement: it
# fails only when a run fails or a count or checksum does not match (said
# loudly, as MISMATCH), never on a figure.
#
# Environment (all optional): LOOM_BUILD_DIR (default build/), BENCH_ROUNDS
# (start rounds, default 5), BENCH_FEED_ROUNDS, BENCH_INFER_ROUNDS (default
# 1), BENCH_FEED_ROWS (default 60000), BENCH_EPOCHS (default 5),
# BENCH_INFER_ROWS (default 10000), BENCH_PARTITIONS (default 4),
# BENCH_FIGURES (default "start feed infer"), BENCH_PEERS (default "loom
# tfos"), BENCH_KEEP=1 (keep the work directory).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
VENV=$ROOT/.venv-tfos

say() { echo "bench/spark: $*" >&2; }

[ -x "$BUILD/loom" ] || { say "$BUILD/loom not found: build first (cmake -S $ROOT -B $BUILD && cmake --build $BUILD)"; exit 2; }
for c in java python3; do command -v $c >/dev/null || { say "$c not found"; exit 2; }; done
[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { say "no Fashion-MNIST in /usr/share/datasets/fashion-mnist"; exit 2; }

# the pinned environment, made once (and again when requirements.txt changes)
PY=$(bash "$ROOT/scripts/setup-venv.sh" bench/spark "$VENV" "$HERE/requirements.txt")

WORK=$(mktemp -d /tmp/loom-bench-spark.XXXXXX)
# every process this bench starts (the driver, its JVM, the executors, their
# python workers, TFoS's managers and nodes, loom's coordinator, agents and
# tasks) inherits this: what is left at the end is found by it and killed
MARK="LOOM_BENCH_SPARK=$WORK"
DRIVER=

mine() {
    local p
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = "$$" ] && continue
        if { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qxF "$MARK"; then echo "${p#/proc/}"; fi
    done
}

cleanup() {
    local left sig
    [ -n "$DRIVER" ] && kill -TERM -- "-$DRIVER" 2>/dev/null || true
    for sig in TERM TERM KILL; do
        left=$(mine)
        [ -z "$left" ] && break
        say "stopping what is left of this bench ($sig):" $left
        kill -$sig $left 2>/dev/null || true
        sleep 2
    done
    left=$(mine)
    [ -z "$left" ] || say "STILL RUNNING after the bench: $left"
    if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export LOOM_BENCH_SPARK=$WORK
export SPARK_HOME=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export PYSPARK_PYTHON=$PY PYSPARK_DRIVER_PYTHON=$PY SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost
export LOOM_BIN=$BUILD/loom LOOM_HOME=$WORK/loom-home PYTHONPATH=$ROOT/python NO_COLOR=1
export TF_CPP_MIN_LOG_LEVEL=2
# loom's own variables from an outer job would confuse the driver
for v in $(env | sed -n 's/^\(LOOM_[A-Z_]*\)=.*/\1/p'); do
    case $v in LOOM_BIN|LOOM_HOME|LOOM_BENCH_SPARK) ;; *) unset "$v" ;; esac
done

say "cpus $(nproc), $(java -version 2>&1 | head -1), $("$PY" -c 'import pyspark, tensorflow as tf, importlib.metadata as m; print("pyspark", pyspark.__version__, "tensorflow", tf.__version__, "tensorflowonspark", m.version("tensorflowonspark"))' 2>/dev/null)"
setsid "$PY" "$HERE/bench.py" "$WORK" 2> >(tee "$WORK/driver.log" >&2) &
DRIVER=$!
rc=0
wait $DRIVER || rc=$?
DRIVER=
exit $rc
