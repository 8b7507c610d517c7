#!/usr/bin/env bash
# bench/launch/run.sh: how long `loom run` takes to start, rendezvous and
# finish N tasks that do nothing (command `true`), next to `mpirun -n N true`
# (Open MPI), for N = 2, 4, 8. One parsable line a figure:
#
#   name=launch peer=loom n=<N> bytes=0 median_s=<s> ratio=<mpirun/loom>
#   name=launch peer=mpirun n=<N> bytes=0 median_s=<s>
#
# median_s is the median wall time over BENCH_REPS runs (default 21) of the
# whole command, from exec to exit. Runs are interleaved (for each rep and
# each N, one loom run and one mpirun run, alternating which goes first) so
# that drift in the machine's load hits both alike. ratio > 1 means loom is
# faster; the goal is ratio >= 1 at N=8. loom's figure includes the full
# rendezvous: every task's agent registers with the coordinator and gets the
# cluster spec before `true` starts. BENCH_FORM=shell measures the string
# form of the command (`command: "true"`, run by /bin/sh -c) instead of the
# list form (exec'd directly). Needs the build (build/, or LOOM_BUILD_DIR).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
LOOM=$BUILD/loom
REPS=${BENCH_REPS:-21}
NS=${BENCH_NS:-2 4 8}
FORM=${BENCH_FORM:-list}
if [ ! -x "$LOOM" ]; then
  echo "bench/launch: $LOOM not found: build first (cmake -S $ROOT -B $BUILD && cmake --build $BUILD)" >&2
  exit 2
fi
if ! command -v mpirun >/dev/null; then
  echo "bench/launch: mpirun not found: install openmpi-bin" >&2
  exit 2
fi
if [ "${EPOCHREALTIME:-}" = "" ]; then
  echo "bench/launch: needs bash >= 5 (EPOCHREALTIME)" >&2
  exit 2
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export LOOM_HOME=$TMP/home
# Stay out of any job this script itself runs in.
unset LOOM_JOB_ID LOOM_JOB_DIR LOOM_COORD LOOM_SECRET LOOM_TASK LOOM_RANK LOOM_WORLD_SIZE
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)

# median of the numbers on stdin
median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# elapsed seconds between two EPOCHREALTIME readings
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.6f", b - a}'; }

for n in $NS; do
  spec=$TMP/launch-$n.yaml
  if [ "$FORM" = shell ]; then cmd='"true"'; else cmd='["true"]'; fi
  printf 'name: launch\nroles: {worker: {instances: %d, command: %s}}\n' "$n" "$cmd" >"$spec"
done

run_loom() { # n -> prints seconds
  local t0 t1
  t0=$EPOCHREALTIME
  if ! "$LOOM" run "$TMP/launch-$1.yaml" >"$TMP/out" 2>&1; then
    echo "bench/launch: loom run failed with $1 tasks:" >&2
    tail -20 "$TMP/out" >&2
    exit 1
  fi
  t1=$EPOCHREALTIME
  elapsed "$t0" "$t1"
}

run_mpi() { # n -> prints seconds
  local t0 t1
  t0=$EPOCHREALTIME
  if ! "${MPIRUN[@]}" -n "$1" true >"$TMP/out" 2>&1; then
    echo "bench/launch: mpirun -n $1 true failed:" >&2
    tail -20 "$TMP/out" >&2
    exit 1
  fi
  t1=$EPOCHREALTIME
  elapsed "$t0" "$t1"
}

# One warm-up of each, not counted (page cache, first-exec costs).
for n in $NS; do run_loom "$n" >/dev/null; run_mpi "$n" >/dev/null; done

declare -A TL TM
for rep in $(seq "$REPS"); do
  for n in $NS; do
    if (( rep % 2 )); then
      TL[$n]+="$(run_loom "$n") "; TM[$n]+="$(run_mpi "$n") "
    else
      TM[$n]+="$(run_mpi "$n") "; TL[$n]+="$(run_loom "$n") "
    fi
  done
done

# Check that the runs did the full rendezvous: the last job of each size
# must have succeeded with every task registered and given the cluster.
for n in $NS; do
  if ! "$LOOM" run "$TMP/launch-$n.yaml" >"$TMP/out" 2>&1; then
    echo "bench/launch: loom run failed with $n tasks:" >&2
    tail -20 "$TMP/out" >&2
    exit 1
  fi
  id=$(sed -n 's/^loom: job \([^ ]*\)$/\1/p' "$TMP/out" | head -1)
  ev=$LOOM_HOME/jobs/$id/events.jsonl
  if [ -z "$id" ] || ! grep -q '"state": *"succeeded"' "$LOOM_HOME/jobs/$id/state.json" ||
     [ "$(grep -c '"event":"registered"' "$ev")" != "$n" ] ||
     ! grep -q '"event":"rendezvous_done"' "$ev"; then
    echo "bench/launch: job of $n tasks did not register all its tasks:" >&2
    cat "$TMP/out" "$ev" >&2 || true
    exit 1
  fi
done

for n in $NS; do
  ml=$(printf '%s\n' ${TL[$n]} | median)
  mm=$(printf '%s\n' ${TM[$n]} | median)
  ratio=$(awk -v a="$mm" -v b="$ml" 'BEGIN {printf "%.3f", a / b}')
  echo "name=launch peer=loom n=$n bytes=0 median_s=$ml ratio=$ratio"
  echo "name=launch peer=mpirun n=$n bytes=0 median_s=$mm"
done
