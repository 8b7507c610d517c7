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
# LOOM_FUZZ_SECONDS each (30), from the committed corpora; a finding fails.
step "fuzzing (tests/fuzz/ci.sh, ${LOOM_FUZZ_SECONDS:-30} s a harness)"
bash tests/fuzz/ci.sh || fail=1
step "system tests (build/)"
LOOM_BUILD_DIR="$PWD/build" $PY -m pytest -q -rs -p no:cacheprovider tests/system || fail=1
# The long training run (fashion) is left out under ASan for time; chaos
# runs (45 to 75 s under ASan on a busy 2-core machine, 15 s without).
# Python loads build-asan's libloom with the ASan runtime preloaded
# (conftest.pylib_env).
step "system tests under ASan/UBSan (build-asan/)"
# The multi-host harness's modules (test_yarn_hosts*: the harness itself,
# and jobs whose C paths the one-host YARN modules, the backend contract
# and test_yarn_ship run under ASan here) run in the normal pass only;
# test_yarn_restart (the application master's resync) runs in both.
LOOM_BUILD_DIR="$PWD/build-asan" $PY -m pytest -q -rs -p no:cacheprovider tests/system \
  --deselect tests/system/test_fashion.py --deselect tests/system/test_yarn_hosts.py \
  --deselect tests/system/test_yarn_hosts_jobs.py \
  --deselect tests/system/test_yarn_hosts_logs.py || fail=1

step "result"
if [ $fail -ne 0 ]; then echo "SOME TESTS FAILED"; exit 1; fi
echo "all tests passed"
