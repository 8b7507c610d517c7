#!/usr/bin/env bash
# test.sh: sets up (scripts/setup.sh) and runs every test: the unit tests
# (cmocka, through ctest) and the system tests (pytest, real loom jobs), on
# the normal build and again under AddressSanitizer + UBSan. Exits non-zero
# if anything failed, if any process wrote a sanitizer report (see
# tests/system/conftest.py), or if a test was skipped for something that
# setup installs (LOOM_NO_SKIP=1; skips are listed either way).
#
#   scripts/test.sh           everything (CI: .ci/run)
#   scripts/test.sh --quick   the fast loop, a few minutes: formatting, mypy,
#                             the unit tests and the system tests marked
#                             quick (QUICK below), normal build only
set -uo pipefail
cd "$(dirname "$0")/.."
quick=
[ "${1:-}" = "--quick" ] && quick=1
# The quick system tests: modules of seconds each (about a minute in all)
# that cover the layering, the CLI, the spec, the task environment, the
# lifecycle, failures and restarts, the Python package, collectives and
# checkpoints; and the backend contract on the local backend alone
# (LOOM_CONTRACT_BACKENDS: no cluster to start).
QUICK=(test_layers.py test_spec.py test_tunables.py test_backends.py test_run.py
       test_contract.py test_lifecycle.py test_failure.py test_restart.py test_python_pkg.py
       test_comm.py test_ckpt.py test_summary.py)
if [ -n "$quick" ]; then
  bash scripts/setup.sh || exit 1
  PY=/usr/bin/python3
  export LOOM_NO_SKIP=1
  fail=0
  echo "=== formatting, mypy, unit tests, quick system tests (build/) ==="
  bash scripts/format.sh --check || fail=1
  mypy --config-file python/pyproject.toml python/loom || fail=1
  ctest --test-dir build --output-on-failure -j2 || fail=1
  LOOM_BUILD_DIR="$PWD/build" LOOM_CONTRACT_BACKENDS=local $PY -m pytest -q -rs -p no:cacheprovider \
    "${QUICK[@]/#/tests/system/}" || fail=1
  [ $fail -eq 0 ] && echo "quick tests passed" || { echo "SOME TESTS FAILED"; exit 1; }
  exit 0
fi
bash scripts/setup.sh --sanitize || exit 1
# TensorFlow and TensorBoard, pinned, in their own environment (.venv-tf/)
LOOM_TF_PYTHON=$(bash scripts/setup-tf.sh) || exit 1
export LOOM_TF_PYTHON
# pyspark, pyarrow and pandas, pinned, in their own environment (.venv-spark/)
LOOM_SPARK_PYTHON=$(bash scripts/setup-spark.sh) || exit 1
export LOOM_SPARK_PYTHON
# mlflow (a tracking server and its client), pinned, in its own environment (.venv-mlflow/)
LOOM_MLFLOW_PYTHON=$(bash scripts/setup-mlflow.sh) || exit 1
export LOOM_MLFLOW_PYTHON

PY=/usr/bin/python3
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_odr_violation=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LOOM_NO_SKIP=1
fail=0
step() { echo; echo "=== $* ==="; }

step "formatting (clang-format, .clang-format)"
bash scripts/format.sh --check || fail=1
step "python types (mypy python/loom)"
mypy --config-file python/pyproject.toml python/loom || fail=1
step "unit tests (build/)"
ctest --test-dir build --output-on-failure -j2 || fail=1
step "unit tests under ASan/UBSan (build-asan/)"
ctest --test-dir build-asan --output-on-failure -j2 || fail=1
# Every decoder of untrusted bytes under libFuzzer (clang, ASan, UBSan) for
# LOOM_FUZZ_SECONDS each (20), from the committed corpora; a finding fails.
# The two system-test passes' one-host Hadoop clusters (clusters.start_hadoop,
# one a pass: they run at the same time, below) start in the background while
# the fuzzers run: they are time-boxed, so it costs them inputs, not minutes.
# Each pass adopts its own (LOOM_TEST_HADOOP_DIR, conftest.py's hadoop
# fixture); this script stops both after the passes and fails if a JVM of
# either is left. If one did not start, its pass starts its own.
HADOOP_DIRS=()
hadoop_py() {  # start|stop DIR: clusters.py on DIR
  (cd tests/system && $PY -c "import sys; from pathlib import Path; import clusters
getattr(clusters, sys.argv[1] + '_hadoop')(Path(sys.argv[2]))" "$1" "$2")
}
# Waits for each cluster's start (DIR.up once it returned 0).
hadoop_started() {
  local d pid
  for d in "${HADOOP_DIRS[@]}"; do
    pid=$(cat "$d.pid" 2>/dev/null) || continue
    rm -f "$d.pid"
    if wait "$pid"; then touch "$d.up"; fi
  done
}
stop_shared_hadoop() {
  hadoop_started
  for d in "${HADOOP_DIRS[@]}"; do
    if [ -f "$d.up" ]; then
      hadoop_py stop "$d" >/dev/null || { echo "stopping the Hadoop cluster $d failed"; fail=1; }
    fi
    rm -rf "$d" "$d.log" "$d.up"
  done
  HADOOP_DIRS=()
}
trap stop_shared_hadoop EXIT
for pass in normal asan; do
  d=$(mktemp -d "/tmp/loom-test-hadoop-$pass.XXXXXX")
  HADOOP_DIRS+=("$d")
  hadoop_py start "$d" >"$d.log" 2>&1 &
  echo $! >"$d.pid"
done
# 20 s a harness: the committed corpora carry what earlier runs found, and
# the time is on the run's critical path (the clusters start in less)
export LOOM_FUZZ_SECONDS=${LOOM_FUZZ_SECONDS:-20}
step "fuzzing (tests/fuzz/ci.sh, $LOOM_FUZZ_SECONDS s a harness)"
bash tests/fuzz/ci.sh || fail=1
# Each system-test module runs in both passes unless it is listed here.
# NORMAL_ONLY: the time is in other processes (TensorFlow, Spark's JVMs,
# Hadoop's daemons across network namespaces) and the loom C paths it takes
# run under ASan in other modules: the long fashion training run; the
# TensorFlow modules (test_tf_*: the agent's port hold, TF_CONFIG and
# restarts run under ASan in test_run, test_contract and test_restart; the
# other TensorFlow cases skip themselves there, conftest.tf_python); the
# multi-host harness's modules (test_yarn_hosts*: the one-host YARN
# modules, the contract and test_yarn_ship run those paths); the Spark
# cases beyond the three that
# the ASan pass keeps (a barrier stage, an executor lost, exactly-once
# inference: the Spark backend's own paths), whose feed, spill, HDFS and
# YARN paths test_feed, test_hdfs*, test_yarn and the contract run under
# ASan; MLflow (test_mlflow: a Python server and client around loom.run(fn),
# whose C paths test_functions runs under ASan).
# ASAN_ONLY: C paths that only this module takes and that need minutes of
# daemons restarted: the application master's resync across a
# ResourceManager and a NodeManager restart (test_yarn_restart).
S=tests/system
SPARK_NORMAL_ONLY=(
  test_tasks_on_a_standalone_cluster_run_the_shipped_binary_with_the_build_hidden
  test_task_restart_and_job_retry_run_in_the_same_stage
  test_stopping_from_the_driver_leaves_nothing
  test_train_feeds_a_dataframe_to_the_tasks_every_epoch
  test_train_streams_the_dataframe_beside_the_job
  test_streaming_waits_for_slow_tasks
  test_a_failed_spill_stops_the_job_with_its_reason
  test_the_spill_and_the_output_can_live_on_hdfs
  test_inference_is_exactly_once_with_an_executor_killed_mid_stage
  test_a_function_runs_in_every_task_and_its_values_and_errors_come_back
  test_train_and_inference_take_a_function_and_an_rdd
  test_on_yarn_every_role_runs_in_yarn_containers_and_a_dataframe_streams
  test_across_hosts_the_tasks_run_on_the_workers_hosts_and_a_dataframe_streams)
NORMAL_ONLY=()
for m in test_fashion test_tf_ports test_tf_ps test_tf_mwms test_tf_helpers test_yarn_hosts test_yarn_hosts_jobs \
         test_yarn_hosts_logs test_mlflow; do
  NORMAL_ONLY+=(--deselect "$S/$m.py")
done
NORMAL_ONLY+=(-k "not ($(IFS='|'; echo "${SPARK_NORMAL_ONLY[*]}" | sed 's/|/ or /g'))")
ASAN_ONLY=(--deselect $S/test_yarn_restart.py)
# The two passes run at the same time, each a pytest process of its own
# with its own Hadoop cluster, Slurm clusters (job ids of their own) and
# temporary directories: one pass alone keeps the 2 cores about 60% busy
# (the rest is waiting on JVMs, daemons and timeouts). The ASan pass is the
# shorter, so the normal pass's modules of local jobs that take the longest
# (NORMAL_LATE: TensorFlow, a notebook's Spark, the 100 MB output, the dashboard in Chromium,
# an MLflow server)
# run after it, in the same process, on its Hadoop cluster: both processes
# then end at about the same time. What each printed is shown at the end.
NORMAL_LATE=(test_tf_ports test_tf_ps test_tf_mwms test_tf_helpers test_notebook test_fashion test_output test_dashboard
             test_metrics test_tensorboard test_mlflow)
LATE_ARGS=() LATE_OUT=()
for m in "${NORMAL_LATE[@]}"; do LATE_ARGS+=("$S/$m.py"); LATE_OUT+=(--deselect "$S/$m.py"); done
LOGS=$(mktemp -d /tmp/loom-test-logs.XXXXXX)
system_pass() {  # NAME CLUSTER BUILD ARGS...: pytest ARGS on BUILD, with the CLUSTER
                 # pass's Hadoop cluster (normal, asan), into $LOGS/NAME.log
  local name=$1 cluster=$2 build=$3 d= h
  shift 3
  for h in "${HADOOP_DIRS[@]}"; do [[ $h == *-$cluster.* ]] && d=$h; done
  (
    if [ -f "$d.up" ]; then
      export LOOM_TEST_HADOOP_DIR=$d
    else
      echo "the $cluster pass's Hadoop cluster did not start (the pass starts its own):"
      tail -20 "$d.log"
    fi
    # Python loads build-asan's libloom with the ASan runtime preloaded
    # (conftest.pylib_env).
    # --durations: the slowest cases of each pass, for the CI-time budget
    LOOM_BUILD_DIR="$PWD/$build" $PY -m pytest -q -rs -p no:cacheprovider --durations=25 \
      --basetemp="$LOGS/$name-tmp" "$@"
  ) >"$LOGS/$name.log" 2>&1
}
step "system tests (build/) and, at the same time, under ASan/UBSan (build-asan/)"
hadoop_started
system_pass normal normal build tests/system "${ASAN_ONLY[@]}" "${LATE_OUT[@]}" &
normal_pid=$!
( rc=0
  system_pass asan asan build-asan tests/system "${NORMAL_ONLY[@]}" || rc=1
  system_pass normal-late asan build "${LATE_ARGS[@]}" || rc=1
  exit $rc ) &
asan_pid=$!
wait $normal_pid || fail=1
wait $asan_pid || fail=1
step "system tests (build/): what the pass printed"
cat "$LOGS/normal.log"
step "system tests under ASan/UBSan (build-asan/): what the pass printed"
cat "$LOGS/asan.log"
step "system tests (build/), the modules that ran after the ASan pass: what they printed"
cat "$LOGS/normal-late.log"
stop_shared_hadoop
rm -rf "$LOGS"

step "result"
if [ $fail -ne 0 ]; then echo "SOME TESTS FAILED"; exit 1; fi
echo "all tests passed"
