#!/usr/bin/env bash
# run.sh: builds the libFuzzer harnesses (clang, LOOM_FUZZ=ON, ASan and
# UBSan) into build-fuzz/ and runs each for SECONDS seconds (default 60) or,
# with RUNS set, that many inputs, starting from the committed corpus
# (tests/fuzz/corpus/<name>/, left untouched: new inputs go to
# build-fuzz/corpus/<name>/). Prints each harness's executed-input count;
# a crash stops the run with the input saved in build-fuzz/ and exit 1.
#   tests/fuzz/run.sh [http_parse|wire_frame|wire_msg ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${SECONDS:-60}
RUNS=${RUNS:--1}
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(http_parse wire_frame wire_msg)
command -v clang >/dev/null || { echo "run.sh: needs clang (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_FUZZ=ON >/dev/null
cmake --build build-fuzz -j2 --target $(printf '%s_fuzz ' "${names[@]}") >/dev/null
for n in "${names[@]}"; do
  mkdir -p build-fuzz/corpus/$n
  log=build-fuzz/$n.log
  (cd build-fuzz && ./tests/fuzz/${n}_fuzz -max_total_time=$SECONDS_EACH -runs=$RUNS \
     -max_len=20000 -print_final_stats=1 corpus/$n ../tests/fuzz/corpus/$n) >$log 2>&1 || {
    tail -40 $log >&2; echo "run.sh: $n failed (log: $log)" >&2; exit 1; }
  # libFuzzer's own summary: "Done <runs> runs in <s> second(s)"
  sed -n "s/^Done \([0-9]*\) runs in \([0-9]*\) second.*/name=$n runs=\1 seconds=\2/p" $log
done
