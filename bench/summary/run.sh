#!/bin/bash
# bench/summary/run.sh: the cost of a summary scalar per call, file only
# against file + dashboard (see bench_summary.c), inside a one-task loom
# job. Prints bench_summary's lines, then how many metrics the coordinator
# kept and dropped (LOOM_METRIC_RATE) from the "every" and "metric" modes.
# Environment: LOOM_BUILD_DIR (default build/), BENCH_N (calls per run,
# default 20000).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
N=${BENCH_N:-20000}
cmake --build "$BUILD" --target loom bench_summary >&2 || exit 1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/job.yaml" <<YAML
name: bench-summary
roles:
  chief: {command: ["$BUILD/bench/summary/bench_summary", "$N"], env: {BENCH_DIR: "$TMP/tb"}}
YAML
LOOM_HOME="$TMP/home" "$BUILD/loom" run "$TMP/job.yaml" 2>/dev/null | sed 's/^\[chief:0\] //' || exit 1
EV=$(ls "$TMP"/home/jobs/*/events.jsonl)
kept=$(grep -c '"event":"metric".*"source":"user"' "$EV")
dropped=$(grep '"event":"metrics_dropped"' "$EV" | sed 's/.*"dropped":\([0-9]*\).*/\1/' | paste -sd+ | bc)
echo "name=coord_metrics kept=$kept dropped=${dropped:-0}"
