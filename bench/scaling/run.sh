#!/usr/bin/env bash
# bench/scaling/run.sh: data-parallel scaling of examples/fashion-mnist/mlp
# under `loom run`: training samples per second with 1, 2 and 4 processes
# (chief + workers, one OpenBLAS thread each), one parsable line a figure:
#
#   name=scaling n=<procs> bytes=0 median_s=<s per epoch> samples_per_s=<global> ratio=<vs n=1>
#   name=scaling_ideal cores=<nproc> n1=<ratio / min(1,cores)> n2=... n4=...
#
# median_s is the median over BENCH_REPS runs (default 3) of the training
# time of BENCH_EPOCHS epochs (default 1, 60000 samples each, global batch
# 256), as mlp measures it (test evaluation and start-up excluded). The last
# line compares each ratio with the ideal speed-up min(n, cores): 1.00 is
# perfect scaling. Needs the build (build/, or LOOM_BUILD_DIR).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
LOOM=$BUILD/loom
MLP=$BUILD/examples/fashion-mnist/mlp
REPS=${BENCH_REPS:-3}
EPOCHS=${BENCH_EPOCHS:-1}
PROCS=${BENCH_PROCS:-1 2 4}
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

cores=$(nproc)
declare -A RATE
for n in $PROCS; do
  spec=$TMP/scaling-$n.yaml
  cmd="[\"$MLP\", \"--epochs\", \"$EPOCHS\", \"--threads\", \"1\", \"--json\"]"
  {
    echo "name: bench-scaling-$n"
    echo 'env: {OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}'
    echo "roles:"
    echo "  chief: {instances: 1, command: $cmd}"
    if [ "$n" -gt 1 ]; then echo "  worker: {instances: $((n - 1)), command: $cmd}"; fi
  } >"$spec"
  times=()
  samples=0
  for _ in $(seq "$REPS"); do
    if ! out=$("$LOOM" run "$spec" 2>&1); then
      echo "bench/scaling: loom run failed with $n processes:" >&2
      echo "$out" | tail -20 >&2
      exit 1
    fi
    json=$(echo "$out" | grep -o '{"test_accuracy".*}' | tail -1)
    if [ -z "$json" ]; then
      echo "bench/scaling: no result line from mlp with $n processes:" >&2
      echo "$out" | tail -20 >&2
      exit 1
    fi
    train_s=$(echo "$json" | sed -n 's/.*"train_s": *\([0-9.eE+-]*\).*/\1/p')
    rate=$(echo "$json" | sed -n 's/.*"samples_per_s": *\([0-9.eE+-]*\).*/\1/p')
    samples=$(awk -v r="$rate" -v t="$train_s" 'BEGIN {printf "%.0f", r * t}')
    times+=("$train_s")
  done
  med=$(printf '%s\n' "${times[@]}" | median)
  RATE[$n]=$(awk -v s="$samples" -v t="$med" 'BEGIN {printf "%.1f", s / t}')
  base=${RATE[1]:-${RATE[$n]}}
  ratio=$(awk -v a="${RATE[$n]}" -v b="$base" 'BEGIN {printf "%.3f", a / b}')
  echo "name=scaling n=$n bytes=0 median_s=$med samples_per_s=${RATE[$n]} ratio=$ratio"
done

line="name=scaling_ideal cores=$cores"
for n in $PROCS; do
  base=${RATE[1]:-}
  [ -n "$base" ] || break
  ideal=$(( n < cores ? n : cores ))
  line="$line n$n=$(awk -v a="${RATE[$n]}" -v b="$base" -v i="$ideal" 'BEGIN {printf "%.3f", a / b / i}')"
done
echo "$line"
