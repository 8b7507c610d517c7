#!/usr/bin/env bash
# run.sh: the data feed's throughput. For lines (about 100 bytes each) and
# fixed 128-byte records, MB megabytes of each in NFILES files (page-cache
# warm), it times reading every record:
#   c_direct          a plain C loop over the files (read + memchr): the ceiling
#   feed_next         loom's feed in a one-worker job, loom_feed_next
#   feed_batch        the same with loom_feed_next_batch(256)
#   python_naive      Python reading the files itself, a record at a time
#   python_feed_*     Python through the loom module: iter (for rec in feed),
#                     batch (bytes objects),
#                     read (one buffer a call), view (memoryviews of the
#                     batch and its offsets, no copy), array (numpy,
#                     reused; fixed)
#   c_direct_work, feed_next_work
#                     both again with WORK iterations of compute per record
#                     (LOOM_BENCH_WORK, about 1.3 ns each): how much of the
#                     reading the feed's read-ahead hides (ratio > 1: faster
#                     than the plain loop, which reads and computes in turn)
# Feed figures are timed inside the task, from loom_feed_open to the end
# (job start-up excluded). One line per figure:
#   name=... n=<records> bytes=<input bytes> median_s=... ratio=<c_direct's
#   time / this time> rec_s=<records/s> mb_s=<MB/s> cpu_s=<median CPU
#   seconds of the reading process, every thread: steadier than the wall
#   time on a busy machine>
# ratio > 1: faster than the ceiling (never, but for the _work figures).
# The figures run interleaved, and each run's record count and checksum are
# checked against c_direct's.
# Usage: bench/feed/run.sh   (REPS=5 MB=256 NFILES=4 WORK=40 LOOM_BUILD_DIR=build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${LOOM_BUILD_DIR:-build}
BUILD=$(cd "$BUILD" && pwd)
REPS=${REPS:-5}
MB=${MB:-256}
NFILES=${NFILES:-4}
WORK=${WORK:-40}
PY=/usr/bin/python3
FB=$BUILD/bench/feed/feedbench
[ -x "$FB" ] || { echo "build first: $FB is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/loom-bench-feed.XXXXXX)
trap 'rm -rf "$work"' EXIT
export LOOM_HOME=$work/home
$PY bench/feed/gen.py "$work" "$MB" "$NFILES"
cat "$work"/*.txt "$work"/*.bin > /dev/null # warm the page cache

# median of the "seconds=" values on stdin; also passes n=
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }

declare -A BASE
report() { # name kind seconds-list records cpu-list
  local name=$1 kind=$2 secs=$3 n=$4 cpus=$5
  local bytes med cmed
  bytes=$(cat "$work"/$([ "$kind" = lines ] && echo 'lines-*.txt' || echo 'fixed-*.bin') | wc -c)
  med=$(echo "$secs" | tr ' ' '\n' | grep . | median)
  cmed=$(echo "$cpus" | tr ' ' '\n' | grep . | median)
  local key=$kind
  case $name in *_work) key=${kind}_work ;; esac
  case $name in c_direct*) BASE[$key]=$med ;; esac
  awk -v name="${name}_$kind" -v n="$n" -v b="$bytes" -v m="$med" -v base="${BASE[$key]}" \
    -v c="$cmed" \
    'BEGIN {printf "name=%s n=%d bytes=%d median_s=%.4f ratio=%.2f rec_s=%.3g mb_s=%.0f cpu_s=%.4f\n",
            name, n, b, m, base / m, n / m, b / m / 1e6, c}'
}

job() { # kind command...: runs a one-worker feed job, prints the task's stdout
  local kind=$1; shift
  local input fmt
  if [ "$kind" = lines ]; then input="$work/lines-*.txt"; fmt=lines; else input="$work/fixed-*.bin"; fmt=fixed:128; fi
  local cmd
  cmd=$(printf '"%s", ' "$@")
  cat > "$work/job.yaml" <<YAML
name: feedbench
env: {PYTHONPATH: "$PWD/python", LOOM_LIBRARY: "$BUILD/libloom.so", OMP_NUM_THREADS: "1"}
roles:
  worker: {command: [${cmd%, }]}
feed: {input: ["$input"], format: "$fmt"}
YAML
  "$BUILD/loom" run "$work/job.yaml" 2>/dev/null | sed 's/^\[worker:0\] //'
}

# The peers run interleaved (rep 1 of each, then rep 2 of each, ...) so that
# load on this shared machine falls on all alike. Every run must read what
# c_direct read: the same record count and, where the peer prints one (the
# C ones), the same checksum (the _work figures against c_direct_work);
# anything else stops the benchmark.
NAMES=(c_direct feed_next feed_batch python_naive python_feed_iter python_feed_batch python_feed_read
       python_feed_view python_feed_array c_direct_work feed_next_work)
for kind in lines fixed; do
  if [ "$kind" = lines ]; then files=("$work"/lines-*.txt); f=lines; else files=("$work"/fixed-*.bin); f=fixed:128; fi
  declare -A SECS=() CPUS=() N=() WANT_N=() WANT_SUM=()
  for _ in $(seq "$REPS"); do
    for name in "${NAMES[@]}"; do
      [ "$name" = python_feed_array ] && [ "$kind" = lines ] && continue
      case $name in
        c_direct) out=$("$FB" direct "$f" "${files[@]}") ;;
        feed_next) out=$(job "$kind" "$FB" feed) ;;
        feed_batch) out=$(job "$kind" "$FB" feed 256) ;;
        python_naive) out=$($PY bench/feed/naive.py "$f" "${files[@]}") ;;
        python_feed_iter) out=$(job "$kind" $PY "$PWD/bench/feed/pyfeed.py" iter) ;;
        python_feed_batch) out=$(job "$kind" $PY "$PWD/bench/feed/pyfeed.py" batch) ;;
        python_feed_read) out=$(job "$kind" $PY "$PWD/bench/feed/pyfeed.py" read) ;;
        python_feed_view) out=$(job "$kind" $PY "$PWD/bench/feed/pyfeed.py" view) ;;
        python_feed_array) out=$(job "$kind" $PY "$PWD/bench/feed/pyfeed.py" array 128) ;;
        c_direct_work) out=$(LOOM_BENCH_WORK=$WORK "$FB" direct "$f" "${files[@]}") ;;
        feed_next_work) out=$(LOOM_BENCH_WORK=$WORK job "$kind" "$FB" feed) ;;
      esac
      n=$(echo "$out" | field records)
      sum=$(echo "$out" | field sum)
      key=plain
      case $name in *_work) key=work ;; esac
      case $name in c_direct*) WANT_N[$key]=${WANT_N[$key]:-$n}; WANT_SUM[$key]=${WANT_SUM[$key]:-$sum} ;; esac
      if [ -z "$n" ] || [ "$n" != "${WANT_N[$key]}" ] ||
         { [ -n "$sum" ] && [ "$sum" != "${WANT_SUM[$key]}" ]; }; then
        echo "run.sh: ${name}_$kind read records=${n:-?} sum=${sum:--}, c_direct read" \
             "records=${WANT_N[$key]} sum=${WANT_SUM[$key]}: not the same data" >&2
        exit 1
      fi
      SECS[$name]="${SECS[$name]:-} $(echo "$out" | field seconds)"
      CPUS[$name]="${CPUS[$name]:-} $(echo "$out" | field cpu)"
      N[$name]=$n
    done
  done
  for name in "${NAMES[@]}"; do
    [ "$name" = python_feed_array ] && [ "$kind" = lines ] && continue
    report "$name" "$kind" "${SECS[$name]}" "${N[$name]}" "${CPUS[$name]}"
  done
  unset SECS CPUS N WANT_N WANT_SUM
done
