#!/usr/bin/env bash
# run.sh: builds the libFuzzer harnesses (clang, LOOM_FUZZ=ON, ASan and
# UBSan) into build-fuzz/ and runs each, one after the other, for SECONDS
# seconds (default 60) or, with RUNS set, that many inputs, starting from
# the committed corpus (tests/fuzz/corpus/<name>/, left untouched: new
# inputs go to build-fuzz/corpus/<name>/). One line per harness:
#
#   name=<harness> runs=<inputs executed> seconds=<wall time> crashes=<0|1>
#
# A finding (crash, sanitizer report, abort, leak, 60 s or more on one
# input, out of memory) stops that harness with its input saved in
# build-fuzz/artifacts/<name>/ and the log's end on stderr; the run then
# stops with exit 1, or with KEEP_GOING=1 goes on to the next harness and
# exits 1 at the end. Exit 2: cannot build or run at all. JOBS=N (default
# 1) runs N harnesses at a time, each still for SECONDS (CI: one a core).
#   tests/fuzz/run.sh [HARNESS ...]    (default: every harness, as below)
# bench/fuzz/run.sh and tests/fuzz/ci.sh run this.
set -euo pipefail
cd "$(dirname "$0")/../.."
# bash counts SECONDS up from the value it inherits: 0 when none was given
SECONDS_EACH=$SECONDS
[ "$SECONDS_EACH" -gt 0 ] || SECONDS_EACH=60
RUNS=${RUNS:--1}
KEEP_GOING=${KEEP_GOING:-0}
# Keep this list in step with tests/fuzz/CMakeLists.txt's FUZZ_HARNESSES.
ALL=(http_parse wire_frame wire_msg wire_auth spec_parse feed_format ps_proto ckpt hadoop_response hadoop_conf hadoop_sasl hadoop_gss hadoop_creds hdfs_reply tfile)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
for n in "${names[@]}"; do
  [[ " ${ALL[*]} " == *" $n "* ]] || { echo "run.sh: no harness $n (known: ${ALL[*]})" >&2; exit 2; }
done
command -v clang >/dev/null || { echo "run.sh: needs clang (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_FUZZ=ON >/dev/null || exit 2
cmake --build build-fuzz -j2 --target $(printf '%s_fuzz ' "${names[@]}") >/dev/null || exit 2
JOBS=${JOBS:-1}
# One harness: its line on stdout, exit 1 on a finding.
run_one() {
  local n=$1
  mkdir -p build-fuzz/corpus/$n build-fuzz/artifacts/$n
  local log=build-fuzz/$n.log t0 t1 runs secs crashes rc=0
  t0=$EPOCHREALTIME
  (cd build-fuzz && ./tests/fuzz/${n}_fuzz -max_total_time=$SECONDS_EACH -runs=$RUNS \
     -max_len=20000 -timeout=60 -print_final_stats=1 -artifact_prefix=artifacts/$n/ \
     corpus/$n ../tests/fuzz/corpus/$n) >$log 2>&1 || rc=$?
  t1=$EPOCHREALTIME
  # libFuzzer's own count, printed at the end whatever happened
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' $log | tail -1)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  crashes=$([ $rc -eq 0 ] && echo 0 || echo 1)
  echo "name=$n runs=${runs:-0} seconds=$secs crashes=$crashes"
  if [ $rc -ne 0 ]; then
    tail -40 $log >&2
    echo "run.sh: $n found something (exit $rc); input in build-fuzz/artifacts/$n/, log $log" >&2
    return 1
  fi
}
failed=0
running=0
for n in "${names[@]}"; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || { failed=1; [ "$KEEP_GOING" = 1 ] || { wait; exit 1; }; }
    running=$((running - 1))
  fi
  run_one "$n" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
exit $failed
