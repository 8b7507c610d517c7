#!/bin/bash
# bench/allreduce/run.sh: loom's allreduce side by side with Open MPI's and
# Gloo's on this machine, in one run, plus the single-core memcpy ceiling.
#
# For world sizes 2 and 4 and f32 sum allreduces of 4 KiB, 1 MiB, 16 MiB and
# 64 MiB it runs: loom over shared memory and over forced TCP (each a loom
# job of N workers: build/loom run SPEC), Open MPI's MPI_Allreduce with its
# default transport (shared memory, btl vader) and with TCP over loopback,
# and Gloo through torch.distributed. Every peer is timed the same way (per
# iteration: barrier, then the allreduce timed on each rank; the iteration
# counts as its slowest rank; the figure is the median over iterations).
#
# The machine is shared and small, so the runs go in BENCH_ROUNDS rounds, each
# running every peer once with a share of the iterations, in an order that
# rotates from round to round; a figure pools the iterations of all rounds.
# Load from other work then falls on every peer alike rather than on one.
#
# Output, on stdout, one line per figure (key=value, parsable):
#   name=memcpy bytes=... rounds=... median_s=... GBps=...
#   name=allreduce peer=mpi|gloo|loom transport=shm|tcp n=... bytes=...
#        rounds=... iters=... median_s=... min_s=... algbw_GBps=...
#        busbw_GBps=... busbw_vs_memcpy=... [ratio_vs_*=...] round_medians_s=...
#   name=allreduce peer=... skipped reason=...  (reason runs to the line's end)
#   name=allreduce_goal goal=... n=... bytes=... ratio=... target=... status=...
# then a summary table of loom's ratios; lines starting with # are comments.
# report.py defines the ratios (all "> 1 means loom is better") and pools the
# rounds; README.md states the goals. Progress goes to stderr.
#
# Environment (all optional):
#   LOOM_BUILD_DIR   the CMake build directory (default: build/ in the repo)
#   BENCH_SIZES      bytes:iters:warmup,... per round (default below)
#   BENCH_ROUNDS     rounds (default 4)
#   BENCH_WORLDS     world sizes (default "2 4")
#   BENCH_PEERS      which peers to run (default "mpi gloo loom")
#   BENCH_TIMEOUT    seconds one peer run may take (default 300)
#   BENCH_WAIT_IDLE  seconds to wait for idle cores before the first round
#                    (default 120; 30 before each later one)
#   BENCH_KEEP=1     keep the work directory (specs, loom's job dirs, logs)
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
PY=/usr/bin/python3
# Per round: bytes:iters:warmup. Four rounds pool 600, 120, 60, 40 iterations.
SIZES=${BENCH_SIZES:-4096:150:20,1048576:30:5,16777216:15:2,67108864:10:1}
ROUNDS=${BENCH_ROUNDS:-4}
WORLDS=${BENCH_WORLDS:-2 4}
PEERS=${BENCH_PEERS:-mpi gloo loom}
TIMEOUT=${BENCH_TIMEOUT:-300}
WORK=$(mktemp -d /tmp/loom-bench-allreduce.XXXXXX)
RAW=$WORK/raw.txt
: >"$RAW"

log() { echo "# $*" >&2; }

# Ends what this script started that may have outlived its parent: only
# processes running a program copied into $WORK (the loom bench binary).
cleanup() {
  local pids
  pids=$(pgrep -f "^$WORK/bin/" 2>/dev/null || true)
  if [ -n "$pids" ]; then
    log "ending leftover bench processes: $pids"
    kill -KILL $pids 2>/dev/null || true
  fi
  if [ "${BENCH_KEEP:-0}" = 1 ]; then
    log "work directory kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Records a figure line (or a skip) both in the raw file and as progress.
record() {
  echo "$1" >>"$RAW"
  echo "#   $1" >&2
}

skip() { # peer transport n reason...
  local peer=$1 transport=$2 n=$3
  shift 3
  # reason= runs to the end of the line.
  record "name=allreduce peer=$peer transport=$transport n=$n skipped reason=$(echo "$*" | tr -s '\n' ';' | sed 's/;$//')"
}

has_peer() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }

# Keeps the figure lines of a peer run's output ($1, a file), stripping the
# "[worker:0] " prefix that loom run adds; says how many it found.
collect() {
  local got=$WORK/collect.tmp
  sed -n 's/^\(\[worker:0\] \)\{0,1\}\(name=allreduce .*\)$/\2/p' "$1" >"$got"
  cat "$got" >>"$RAW"
  sed 's/ samples_s=.*//; s/^/#   /' "$got" >&2
  wc -l <"$got"
}

nsizes=$(echo "$SIZES" | tr ',' '\n' | grep -c .)

# ---- build -----------------------------------------------------------------
log "work directory $WORK; build directory $BUILD"
cmake_ok=1
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  log "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" >"$WORK/configure.log" 2>&1 || cmake_ok=0
fi
mkdir -p "$WORK/bin"
MEMCPY=$WORK/bin/memcpy_bw
if [ $cmake_ok = 1 ] &&
   cmake --build "$BUILD" --target bench_allreduce_memcpy >"$WORK/build-memcpy.log" 2>&1; then
  cp "$BUILD/bench/allreduce/bench_allreduce_memcpy" "$MEMCPY"
else
  log "memcpy: CMake build failed, compiling with cc directly"
  cc -O2 -o "$MEMCPY" "$HERE/memcpy_bw.c" 2>>"$WORK/build-memcpy.log" || MEMCPY=
fi

loom_reason=
if has_peer loom; then
  if [ $cmake_ok = 0 ]; then
    loom_reason="cmake configure failed: $(tail -n 3 "$WORK/configure.log")"
  elif ! cmake --build "$BUILD" -j2 --target loom bench_allreduce_loom \
         >"$WORK/build-loom.log" 2>&1; then
    loom_reason="build of loom or bench_allreduce_loom failed: $(grep -m 3 -E 'error|undefined reference' "$WORK/build-loom.log")"
  elif ! [ -x "$BUILD/loom" ]; then
    loom_reason="no $BUILD/loom after the build"
  else
    cp "$BUILD/bench/allreduce/bench_allreduce_loom" "$WORK/bin/loom_allreduce"
  fi
fi

mpi_reason=
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
if has_peer mpi; then
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    mpi_reason="mpicc or mpirun not found (install openmpi-bin and libopenmpi-dev)"
  elif ! mpicc -O2 -o "$WORK/bin/mpi_allreduce" "$HERE/mpi_allreduce.c" \
         >"$WORK/build-mpi.log" 2>&1; then
    mpi_reason="mpicc failed: $(head -n 3 "$WORK/build-mpi.log")"
  fi
fi

gloo_reason=
if has_peer gloo; then
  if ! [ -x "$PY" ]; then
    gloo_reason="$PY not found (Debian's python3-torch provides Gloo)"
  elif ! "$PY" -c 'import torch.distributed as d, sys; sys.exit(0 if d.is_gloo_available() else 1)' \
         >"$WORK/gloo-check.log" 2>&1; then
    gloo_reason="torch.distributed with gloo not importable by $PY: $(tail -n 1 "$WORK/gloo-check.log")"
  fi
fi

# Other work on this machine skews every figure: before a round, wait (up to
# $1 seconds) for the cores to be idle, and say how busy they were.
busy_pct() { # percent of CPU time not idle over one second
  local a b
  read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ </proc/stat
  sleep 1
  read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ </proc/stat
  a=$((b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 - a1 - a2 - a3 - a4 - a5 - a6 - a7 - a8))
  b=$((b4 + b5 - a4 - a5))
  echo $(((a - b) * 100 / (a > 0 ? a : 1)))
}
machine() { echo "# machine $1: cores ${2}% busy with other work, load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; }
wait_idle() { # max_seconds label
  local waited=0 busy
  busy=$(busy_pct)
  while [ "$busy" -gt 10 ] && [ "$waited" -lt "$1" ]; do
    [ "$waited" = 0 ] && log "cores ${busy}% busy with other work: waiting up to ${1}s for them to idle"
    sleep 4
    waited=$((waited + 5))
    busy=$(busy_pct)
  done
  machine "$2" "$busy" | tee -a "$WORK/load.txt" >&2
}
: >"$WORK/load.txt"

# ---- peers -----------------------------------------------------------------
# Runs one peer's command (after "--") with the timeout; on failure or
# missing figures, records a skip for it with the tail of its output.
run_peer() { # peer transport n -- command...
  local peer=$1 transport=$2 n=$3 out rc got
  shift 4
  out=$WORK/$peer-$transport-$n-round$round.out
  log "round $round: $peer transport=$transport n=$n"
  timeout -k 15 -s "${SIG:-TERM}" "$TIMEOUT" "$@" >"$out" 2>&1
  rc=$?
  got=$(collect "$out")
  if [ "$rc" != 0 ] || [ "$got" -lt "$nsizes" ]; then
    [ "$rc" = 124 ] && rc="124 (timed out after ${TIMEOUT}s)"
    skip "$peer" "$transport" "$n" "round $round: exit $rc, got $got of $nsizes sizes; last output: $(grep -v -e '^\s*$' -e 'token=' "$out" | tail -n 4)"
  fi
}

loom_job() { # transport n: writes the job spec, prints its path
  local transport=$1 n=$2 spec=$WORK/loom-$1-$2.yaml tenv=
  [ "$transport" = tcp ] && tenv=', LOOM_COMM_TRANSPORT: "tcp"'
  cat >"$spec" <<YAML
# generated by bench/allreduce/run.sh
name: bench-allreduce-$transport-$n
env: {OMP_NUM_THREADS: "1"$tenv}
roles:
  worker:
    instances: $n
    command: ["$WORK/bin/loom_allreduce", "--sizes", "$SIZES"]
YAML
  echo "$spec"
}

# One peer run: "peer transport n".
run_one() {
  local peer=$1 transport=$2 n=$3 reason
  eval "reason=\${${peer}_reason}"
  if [ -n "$reason" ]; then
    [ "$round" = 1 ] && skip "$peer" "$transport" "$n" "$reason"
    return
  fi
  case $peer-$transport in
  mpi-shm)
    run_peer mpi shm "$n" -- $MPIRUN -n "$n" \
      "$WORK/bin/mpi_allreduce" --transport shm --sizes "$SIZES" ;;
  mpi-tcp) # pml ob1, so that the btl choice is what carries the data
    run_peer mpi tcp "$n" -- $MPIRUN -n "$n" --mca pml ob1 \
      --mca btl tcp,self --mca btl_tcp_if_include lo \
      "$WORK/bin/mpi_allreduce" --transport tcp --sizes "$SIZES" ;;
  gloo-tcp)
    run_peer gloo tcp "$n" -- "$PY" "$HERE/gloo_allreduce.py" --n "$n" --sizes "$SIZES" ;;
  loom-*)
    local spec
    spec=$(loom_job "$transport" "$n")
    mkdir -p "$WORK/loom-home"
    # SIGINT: loom run kills the job when it is interrupted.
    ( unset LOOM_COMM_TRANSPORT
      [ "$transport" = tcp ] && export LOOM_COMM_TRANSPORT=tcp
      export LOOM_HOME=$WORK/loom-home
      SIG=INT
      run_peer loom "$transport" "$n" -- "$BUILD/loom" run "$spec" ) ;;
  esac
}

RUNS=()
for n in $WORLDS; do
  for pt in "mpi shm" "mpi tcp" "gloo tcp" "loom shm" "loom tcp"; do
    has_peer "${pt%% *}" && RUNS+=("$pt $n")
  done
done

for round in $(seq 1 "$ROUNDS"); do
  wait_idle "$([ "$round" = 1 ] && echo "${BENCH_WAIT_IDLE:-120}" || echo 30)" "before round $round"
  if [ -n "$MEMCPY" ]; then
    "$MEMCPY" --bytes $((64 << 20)) --iters 20 --warmup 3 | tee -a "$RAW" | sed 's/^/#   /' >&2
  elif [ "$round" = 1 ]; then
    record "name=memcpy skipped reason=could not build memcpy_bw.c"
  fi
  # Rotate the order so that no peer always runs first or last.
  k=${#RUNS[@]}
  for ((i = 0; i < k; i++)); do
    run_one ${RUNS[$(((i + (round - 1) * k / ROUNDS) % k))]}
  done
done

# ---- report ----------------------------------------------------------------
machine "after the run" "$(busy_pct)" | tee -a "$WORK/load.txt" >&2
if [ -x "$PY" ] || command -v python3 >/dev/null; then
  "$( [ -x "$PY" ] && echo "$PY" || echo python3)" "$HERE/report.py" "$RAW" "$WORK/load.txt"
else
  log "no python3 for report.py: raw figures follow"
  cat "$RAW"
fi
