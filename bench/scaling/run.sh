#!/usr/bin/env bash
# bench/scaling/run.sh: data-parallel scaling of examples/fashion-mnist/mlp
# under `loom run`: training samples per second with 1, 2 and 4 processes
# (chief + workers, one OpenBLAS thread each), next to the machine's own
# ceiling for 2: two independent one-process jobs running at the same time
# (no communication at all; their samples/s added). One parsable line a
# figure:
#
#   name=scaling n=<procs> bytes=0 median_s=<s> samples_per_s=<global> ratio=<vs n=1> [vs_ceiling=]
#   name=scaling_ceiling n=2 bytes=0 median_s=<s> samples_per_s=<both> ratio=<vs n=1>
#   name=scaling_ideal cores=<nproc> n1=<ratio / min(n,cores)> n2=... n4=...
#
# Each repetition (BENCH_REPS, default 5) runs every figure once, in turn,
# so that load on a shared machine falls on all alike; a figure's
# samples_per_s is the median over the repetitions, median_s the median
# training time of BENCH_EPOCHS epochs (default 2, 60000 samples each,
# global batch 256) as mlp measures it (test evaluation and start-up
# excluded; for the ceiling, the slower job's). vs_ceiling (n=2 only) is
# samples_per_s over the ceiling's: 1.00 means synchronous data
# parallelism costs nothing over two processes that never talk. The last
# line compares each ratio with the ideal speed-up min(n, cores). Needs the
# build (build/, or LOOM_BUILD_DIR). BENCH_PROCS (default "1 2 4") picks
# the world sizes; the ceiling runs when 1 and 2 are among them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
LOOM=$BUILD/loom
MLP=$BUILD/examples/fashion-mnist/mlp
REPS=${BENCH_REPS:-5}
EPOCHS=${BENCH_EPOCHS:-2}
PROCS=${BENCH_PROCS:-1 2 4}
# BENCH_MLP_ARGS: more arguments for every mlp (e.g. --copy-grads)
EXTRA=""
for a in ${BENCH_MLP_ARGS:-}; do EXTRA="$EXTRA, \"$a\""; done
for f in "$LOOM" "$MLP"; do
  if [ ! -x "$f" ]; then
    echo "bench/scaling: $f not found: build first (cmake -S $ROOT -B $BUILD && cmake --build $BUILD)" >&2
    exit 2
  fi
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LOOM_HOME=$TMP/home
# Stay out of any job this script itself runs in.
unset LOOM_JOB_ID LOOM_COORD LOOM_SECRET LOOM_RANK LOOM_WORLD_SIZE

# median of the numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# spec NAME N: a job of N mlp processes
spec() {
  local name=$1 n=$2 file=$TMP/$1.yaml
  local cmd="[\"$MLP\", \"--epochs\", \"$EPOCHS\", \"--threads\", \"1\", \"--json\"$EXTRA]"
  {
    echo "name: $name"
    echo 'env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}'
    echo "roles:"
    echo "  chief: {instances: 1, command: $cmd}"
    if [ "$n" -gt 1 ]; then echo "  worker: {instances: $((n - 1)), command: $cmd}"; fi
  } >"$file"
  echo "$file"
}

# result FILE WHAT: "train_s samples_per_s" of the job's output in FILE
result() {
  local json
  json=$(grep -o '{"test_accuracy".*}' "$1" | tail -1 || true)
  if [ -z "$json" ]; then
    echo "bench/scaling: no result line from mlp ($2):" >&2
    tail -20 "$1" >&2
    exit 1
  fi
  echo "$(echo "$json" | sed -n 's/.*"train_s": *\([0-9.eE+-]*\).*/\1/p')" \
    "$(echo "$json" | sed -n 's/.*"samples_per_s": *\([0-9.eE+-]*\).*/\1/p')"
}

# run WHAT SPEC...: runs each spec as its own `loom run`, all at the same
# time, and prints "max_train_s summed_samples_per_s"
run() {
  local what=$1 i=0 pids=() t=0 r=0 res ts rate
  shift
  for s in "$@"; do
    "$LOOM" run "$s" >"$TMP/out.$i" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  for ((j = 0; j < i; j++)); do
    if ! wait "${pids[$j]}"; then
      echo "bench/scaling: loom run failed ($what):" >&2
      tail -20 "$TMP/out.$j" >&2
      exit 1
    fi
  done
  for ((j = 0; j < i; j++)); do
    res=$(result "$TMP/out.$j" "$what") || exit 1
    read -r ts rate <<<"$res"
    t=$(awk -v a="$t" -v b="$ts" 'BEGIN {print (b > a ? b : a)}')
    r=$(awk -v a="$r" -v b="$rate" 'BEGIN {print a + b}')
  done
  echo "$t $r"
}

cores=$(nproc)
ceiling=0
case " $PROCS " in *" 1 "*) case " $PROCS " in *" 2 "*) ceiling=1 ;; esac ;; esac
FIGS=""
for n in $PROCS; do
  FIGS="$FIGS n$n"
  SPEC[$n]=$(spec "bench-scaling-$n" "$n")
done
if [ "$ceiling" = 1 ]; then
  FIGS="$FIGS ceiling"
  CA=$(spec bench-scaling-solo-a 1)
  CB=$(spec bench-scaling-solo-b 1)
fi
declare -A TIMES RATES
for _ in $(seq "$REPS"); do
  for f in $FIGS; do
    if [ "$f" = ceiling ]; then
      res=$(run "two independent jobs" "$CA" "$CB") || exit 1
    else
      res=$(run "${f#n} processes" "${SPEC[${f#n}]}") || exit 1
    fi
    read -r t r <<<"$res"
    TIMES[$f]="${TIMES[$f]:-} $t"
    RATES[$f]="${RATES[$f]:-} $r"
  done
done

med() { printf '%s\n' $1 | median; }
base=""
for n in $PROCS; do
  rate=$(med "${RATES[n$n]}")
  [ -n "$base" ] || base=$rate
  RATE[$n]=$rate
  line="name=scaling n=$n bytes=0 median_s=$(med "${TIMES[n$n]}") samples_per_s=$rate"
  line="$line ratio=$(awk -v a="$rate" -v b="$base" 'BEGIN {printf "%.3f", a / b}')"
  if [ "$n" = 2 ] && [ "$ceiling" = 1 ]; then
    crate=$(med "${RATES[ceiling]}")
    line="$line vs_ceiling=$(awk -v a="$rate" -v b="$crate" 'BEGIN {printf "%.3f", a / b}')"
  fi
  echo "$line"
done
if [ "$ceiling" = 1 ]; then
  crate=$(med "${RATES[ceiling]}")
  echo "name=scaling_ceiling n=2 bytes=0 median_s=$(med "${TIMES[ceiling]}") samples_per_s=$crate" \
    "ratio=$(awk -v a="$crate" -v b="${RATE[1]}" 'BEGIN {printf "%.3f", a / b}')"
fi

line="name=scaling_ideal cores=$cores"
for n in $PROCS; do
  [ -n "${RATE[1]:-}" ] || break
  ideal=$((n < cores ? n : cores))
  line="$line n$n=$(awk -v a="${RATE[$n]}" -v b="${RATE[1]}" -v i="$ideal" 'BEGIN {printf "%.3f", a / b / i}')"
done
echo "$line"
