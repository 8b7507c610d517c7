#!/bin/bash
# bench/ps/run.sh: loom's parameter server, pull and push throughput, next
# to its ceiling: the same bytes exchanged over one plain TCP connection
# (bench_ps echo), measured in the same run, interleaved.
#
# For 1 and 2 shards (standalone `loom ps` processes on loopback, as a job's
# ps role runs them) it times, from one client (bench_ps run):
#   dense pull and push of 4 KiB, 256 KiB, 4 MiB and 64 MiB (SGD: the server
#     applies each push at once), a variable over 1 MiB split over the shards
#   sparse pull and push of 4096 random keys x 16 floats of a 1M-row table
# Output: one line per figure (see bench_ps.c), e.g.
#   name=ps_dense_pull shards=2 n=1048576 bytes=4194304 iters=.. median_s=.. GBps=.. ratio=..
#   name=tcp_echo_dense_pull shards=2 n=1048576 bytes=4194304 ... ratio=1
# ratio: plain TCP's median over the ps figure's (1.0 = the ceiling; > 1 is
# better for loom, the benchmarks' convention).
#
# Environment: LOOM_BUILD_DIR (default build/), BENCH_SHARDS (default "1 2"),
# BENCH_ONLY (figures to run, e.g. "sparse_pull,dense_push"; default all).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
SHARDS=${BENCH_SHARDS:-1 2}
cmake --build "$BUILD" --target loom bench_ps >&2 || exit 1
BENCH=$BUILD/bench/ps/bench_ps
SECRET=bench-$RANDOM-$RANDOM
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
trap cleanup EXIT INT TERM

read -r EPORT < <("$BENCH" ports 1)
"$BENCH" echo "$EPORT" & PIDS+=($!)
for n in $SHARDS; do
  mapfile -t PORTS < <("$BENCH" ports "$n")
  LIST="" JSON=""
  for p in "${PORTS[@]}"; do
    LIST+="${LIST:+,}127.0.0.1:$p"
    JSON+="${JSON:+,}\"127.0.0.1:$p\""
  done
  SERVED=()
  for ((i = 0; i < n; i++)); do
    LOOM_CLUSTER="{\"ps\":[$JSON]}" LOOM_INDEX=$i LOOM_SECRET=$SECRET LOOM_WORLD_SIZE=1 \
      "$BUILD/loom" ps 2>/dev/null & SERVED+=($!)
  done
  echo "# $n shard(s) at $LIST" >&2
  LOOM_SECRET=$SECRET "$BENCH" run --servers "$LIST" --echo "127.0.0.1:$EPORT" --label "$n" \
    ${BENCH_ONLY:+--only "$BENCH_ONLY"}
  for p in "${SERVED[@]}"; do kill -TERM "$p"; wait "$p"; done
done
