#!/usr/bin/env bash
# bench/fuzz/run.sh: runs every libFuzzer harness (tests/fuzz/, built by
# tests/fuzz/run.sh into build-fuzz/ with clang, ASan and UBSan) for
# SECONDS seconds each (default 30), one after the other, and prints one
# line per harness:
#
#   name=fuzz_<harness> n=<inputs executed> bytes=0 median_s=<wall seconds>
#     execs_per_s=<n / median_s> crashes=<0|1>
#
# (one line each). A fuzz bench has no peer and no ratio: its figures are
# how many inputs each harness got through in the time, and whether it
# found anything (crashes=1: its input is in build-fuzz/artifacts/<name>/).
# Every harness runs even after a finding; exits 1 if any found one.
#   bench/fuzz/run.sh [HARNESS ...]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# bash counts SECONDS up from the value it inherits: 0 when none was given
S=$SECONDS
[ "$S" -gt 0 ] || S=30
out=$(SECONDS=$S KEEP_GOING=1 "$ROOT/tests/fuzz/run.sh" "$@")
rc=$?
echo "$out" | awk '/^name=/ {
  for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
  printf "name=fuzz_%s n=%s bytes=0 median_s=%s execs_per_s=%.0f crashes=%s\n",
         f["name"], f["runs"], f["seconds"], f["seconds"] > 0 ? f["runs"] / f["seconds"] : 0,
         f["crashes"]
}'
exit $rc
