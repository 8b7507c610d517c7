# bench/allreduce/common.sh: what run.sh (one machine) and hosts.sh (three
# network namespaces) share, sourced by both: building the peers, waiting for
# idle cores, running one peer with a timeout and keeping its figure lines.
#
# The sourcing script sets, before it sources this file:
#   HERE, ROOT, BUILD, PY   the bench directory, the repo, the CMake build
#                           directory, the python3 that has torch
#   WORK, RAW               its work directory and the raw figure file in it
#   SIZES, TIMEOUT          bytes:iters:warmup,... per round; seconds per peer run
# and, while it runs, `round` (for run_peer's file names and messages).

log() { echo "# $*" >&2; }

nsizes=$(echo "$SIZES" | tr ',' '\n' | grep -c .)

# Ends what the script started that may have outlived its parent: only
# processes running a program copied into $WORK (the loom bench binary).
kill_work_bin() {
  local pids
  pids=$(pgrep -f "^$WORK/bin/" 2>/dev/null || true)
  if [ -n "$pids" ]; then
    log "ending leftover bench processes: $pids"
    kill -KILL $pids 2>/dev/null || true
  fi
}

# Ends the peer run in progress, if any (from the script's exit trap): its
# timeout passes the signal on to the command.
stop_peer() {
  local pid sig
  [ -f "$WORK/peer.pid" ] || return 0
  read -r pid sig <"$WORK/peer.pid"
  log "stopping the peer run in progress (pid $pid, SIG$sig)"
  kill -s "$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$WORK/peer.pid"
}

remove_work() {
  if [ "${BENCH_KEEP:-0}" = 1 ]; then
    log "work directory kept: $WORK"
  else
    rm -rf "$WORK"
  fi
}

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

# Keeps the figure lines of a peer run's output ($1, a file), stripping the
# "[worker:0] " prefix that loom adds to a task's lines and naming the peer
# $2 (the programs print peer=loom|mpi|gloo; hosts.sh runs loom twice, as
# loom and loom_tls); says how many it found.
collect() { # file peer
  local got=$WORK/collect.tmp
  sed -n 's/^\(\[worker:0\] \)\{0,1\}\(name=allreduce .*\)$/\2/p' "$1" |
    sed "s/ peer=[^ ]* / peer=$2 /" >"$got"
  cat "$got" >>"$RAW"
  sed 's/ samples_s=.*//; s/^/#   /' "$got" >&2
  wc -l <"$got"
}

# Runs one peer's command (after "--") with the timeout; on failure or
# missing figures, records a skip for it with the tail of its output.
run_peer() { # peer transport n -- command...
  local peer=$1 transport=$2 n=$3 out rc got
  shift 4
  out=$WORK/$peer-$transport-$n-round$round.out
  log "round $round: $peer transport=$transport n=$n"
  # In the background and waited for, so that a Ctrl-C or kill reaches the
  # script's trap at once (stop_peer then ends the run).
  timeout -k 15 -s "${SIG:-TERM}" "$TIMEOUT" "$@" >"$out" 2>&1 &
  echo "$! ${SIG:-TERM}" >"$WORK/peer.pid"
  wait $!
  rc=$?
  rm -f "$WORK/peer.pid"
  got=$(collect "$out" "$peer")
  if [ "$rc" != 0 ] || [ "$got" -lt "$nsizes" ]; then
    [ "$rc" = 124 ] && rc="124 (timed out after ${TIMEOUT}s)"
    skip "$peer" "$transport" "$n" "round $round: exit $rc, got $got of $nsizes sizes; last output: $(grep -v -e '^\s*$' -e 'token=' "$out" | tail -n 4)"
  fi
}

# ---- building the peers ------------------------------------------------------
# Each sets <peer>_reason to why the peer cannot run, or to "" when it can.

cmake_ok=1
configure_build() {
  if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    log "configuring $BUILD"
    cmake -S "$ROOT" -B "$BUILD" >"$WORK/configure.log" 2>&1 || cmake_ok=0
  fi
  mkdir -p "$WORK/bin"
}

# loom and the bench program ($WORK/bin/loom_allreduce, a copy, so that
# kill_work_bin can find what is left of it).
build_loom() {
  loom_reason=
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
}

# The Open MPI program, $WORK/bin/mpi_allreduce.
build_mpi() {
  mpi_reason=
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    mpi_reason="mpicc or mpirun not found (install openmpi-bin and libopenmpi-dev)"
  elif ! mpicc -O2 -o "$WORK/bin/mpi_allreduce" "$HERE/mpi_allreduce.c" \
    >"$WORK/build-mpi.log" 2>&1; then
    mpi_reason="mpicc failed: $(head -n 3 "$WORK/build-mpi.log")"
  fi
}

# Gloo comes with Debian's python3-torch: nothing to build, only to check.
check_gloo() {
  gloo_reason=
  if ! [ -x "$PY" ]; then
    gloo_reason="$PY not found (Debian's python3-torch provides Gloo)"
  elif ! "$PY" -c 'import torch.distributed as d, sys; sys.exit(0 if d.is_gloo_available() else 1)' \
    >"$WORK/gloo-check.log" 2>&1; then
    gloo_reason="torch.distributed with gloo not importable by $PY: $(tail -n 1 "$WORK/gloo-check.log")"
  fi
}

# ---- how busy the machine is ---------------------------------------------------
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
wait_idle() { # max_seconds label; appends the machine line to $WORK/load.txt
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
