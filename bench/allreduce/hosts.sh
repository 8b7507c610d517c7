#!/bin/bash
# bench/allreduce/hosts.sh: loom's allreduce across three "hosts" (network
# namespaces joined by a bridge), with and without TLS, side by side with
# Open MPI over TCP and Gloo across the same namespaces, in one run. Run it
# as root (it makes network namespaces):
#
#   sudo bench/allreduce/hosts.sh       # about 3 minutes on an idle 2-core machine
#
# It makes namespaces <tag>-h0, -h1, -h2 (tag = lmbh<pid>), each with a veth
# lan0 at 10.79.K.<i+1>/24 whose other end is on a bridge in a fourth, hub
# namespace, and runs world size 3, one rank per namespace, f32 sum
# allreduces (in place) of 4 KiB (latency), 16 MiB and 64 MiB:
#
#   loom      loom_allreduce.c as a loom job (backend: external): `loom
#             submit --bind` on h0's bridge address, one `loom agent` per
#             namespace, LOOM_COMM_TRANSPORT=tcp, LOOM_TLS=off everywhere
#   loom_tls  the same with LOOM_TLS=on
#   mpi       mpi_allreduce.c under mpirun (started in h0), a hostfile of the
#             three bridge addresses, an rsh agent that runs `ip netns exec`,
#             pml ob1, btl tcp,self on the bridge subnet only
#   gloo      gloo_allreduce.py --worker, one process per namespace,
#             MASTER_ADDR h0's bridge address, GLOO_SOCKET_IFNAME=lan0
#
# in interleaved rounds as run.sh does (every peer once per round, the order
# rotating), every rank printing where it runs (namespace, address, CPUs):
# a run whose ranks are not one per namespace fails. Everything it made goes
# when it exits, whatever the reason (Ctrl-C included), and it checks that
# no namespace, link or process of its own is left.
#
# Output on stdout (report_hosts.py): one line per figure,
#   name=allreduce_hosts peer=mpi|gloo|loom|loom_tls n=3 bytes=... median_s=...
#        busbw_GBps=... [ratio=... ratio_vs_gloo=... tls_cost=...]
#   name=allreduce_hosts_goal goal=... status=PASS|FAIL|NA
# then a table; lines starting with # are comments. Progress goes to stderr.
#
# Environment (all optional):
#   LOOM_BUILD_DIR   the CMake build directory (default: build/ in the repo)
#   BENCH_SIZES      bytes:iters:warmup,... per round (default below)
#   BENCH_ROUNDS     rounds (default 4)
#   BENCH_PEERS      which peers (default "mpi gloo loom loom_tls")
#   BENCH_TIMEOUT    seconds one peer run may take (default 150)
#   BENCH_WAIT_IDLE  seconds to wait for idle cores before the first round
#                    (default 30; 10 before each later one)
#   BENCH_MPI_YIELD  mpi_yield_when_idle for Open MPI (default 1, see README)
#   BENCH_MPI_ARGS   more mpirun arguments (say, --mca coll_tuned_... to try
#                    another allreduce algorithm)
#   BENCH_LOOM_ENV   more environment for every loom process, "K=V K=V"
#                    (say, LOOM_COMM_SPIN=0 LOOM_COMM_YIELD=0)
#   BENCH_KEEP=1     keep the work directory (specs, job dirs, every output)
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
PY=/usr/bin/python3
# Per round: bytes:iters:warmup. Four rounds pool 400, 40 and 24 iterations.
SIZES=${BENCH_SIZES:-4096:100:20,16777216:10:2,67108864:6:1}
ROUNDS=${BENCH_ROUNDS:-4}
PEERS=${BENCH_PEERS:-mpi gloo loom loom_tls}
TIMEOUT=${BENCH_TIMEOUT:-150}
N=3

# ---- one peer run, in a child of this script ---------------------------------
# run_peer (common.sh) runs `hosts.sh --peer-run PEER` under timeout; the
# namespaces, addresses and work directory come in the environment. It
# prints the peer's output (figure lines from rank 0, "# where" lines from
# every rank) and fails if the run failed or a rank was not where it belongs.

# Checks the "# where peer=P rank=R netns=NS addr=A cpus=C" lines of one
# run (on stdin): rank r in namespace r, at its address. Prints them.
check_where() {
  local lines ok=0 r ns
  lines=$(sed -n 's/^\(\[[^]]*\] \)\{0,1\}\(# where .*\)$/\2/p' | sort -u)
  echo "$lines"
  read -r -a ns <<<"$HOSTS_NS"
  read -r -a addr <<<"$HOSTS_ADDRS"
  for ((r = 0; r < N; r++)); do
    if echo "$lines" | grep -q " rank=$r netns=${ns[$r]} addr=${addr[$r]}/24 "; then
      ok=$((ok + 1))
    else
      echo "rank $r did not say it runs in ${ns[$r]} at ${addr[$r]}" >&2
    fi
  done
  [ "$ok" = "$N" ] && [ "$(echo "$lines" | grep -c .)" = "$N" ]
}

# Waits for the pids given; when one fails, ends the others (a rank left
# alone blocks until its library's own timeout). Returns the first failure.
# Each pid is waited for once: `wait -n` over pids already reaped returns
# 127 ("not a child") when two end together, which once made a run that
# had succeeded look failed.
wait_ranks() {
  local rc=0 r p done_pid
  local -a left=("$@") rest
  while [ "${#left[@]}" -gt 0 ]; do
    done_pid=
    wait -n -p done_pid "${left[@]}"
    r=$?
    if [ -z "$done_pid" ]; then # none of them is our child any more
      for p in "${left[@]}"; do
        wait "$p" 2>/dev/null
        r=$?
        [ "$r" != 0 ] && [ "$r" != 127 ] && [ "$rc" = 0 ] && rc=$r
      done
      break
    fi
    rest=()
    for p in "${left[@]}"; do [ "$p" != "$done_pid" ] && rest+=("$p"); done
    left=("${rest[@]}")
    if [ "$r" != 0 ] && [ "$rc" = 0 ]; then
      rc=$r
      kill "$@" 2>/dev/null
    fi
  done
  return $rc
}

env_of() { # pid VAR: VAR's value in that process's environment, or "-"
  local v
  v=$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n "s/^$2=//p")
  echo "${v:--}"
}

peer_mpi() {
  local hf=$WORK/hostfile ns addr
  read -r -a ns <<<"$HOSTS_NS"
  read -r -a addr <<<"$HOSTS_ADDRS"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 WHERE_PEER=mpi
  # bind-to none: every "host" here thinks it has the machine's cores to
  # itself, and would bind its one rank to core 0, all three on one core.
  # mpi_yield_when_idle: three ranks share two cores, as with mpirun
  # --oversubscribe on one host (README.md).
  ip netns exec "${ns[0]}" mpirun --allow-run-as-root -n $N --hostfile "$hf" \
    --map-by node --bind-to none \
    --mca plm_rsh_agent "$WORK/bin/rsh-netns" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include "$HOSTS_CIDR" --mca oob_tcp_if_include "$HOSTS_CIDR" \
    --mca mpi_yield_when_idle "${BENCH_MPI_YIELD:-1}" ${BENCH_MPI_ARGS:-} \
    "$WORK/bin/where" "$WORK/bin/mpi_allreduce" --transport tcp --sizes "$SIZES" \
    >"$WORK/mpi.run" 2>&1
  local rc=$?
  cat "$WORK/mpi.run"
  check_where <"$WORK/mpi.run" >/dev/null || rc=1
  return $rc
}

peer_gloo() {
  local ns addr i pids=() rc
  read -r -a ns <<<"$HOSTS_NS"
  read -r -a addr <<<"$HOSTS_ADDRS"
  trap 'kill ${pids[*]} 2>/dev/null; exit 143' TERM
  for ((i = 0; i < N; i++)); do
    # a port of its own per round: the last round's may be in TIME_WAIT
    ip netns exec "${ns[$i]}" env RANK=$i WORLD_SIZE=$N LOCAL_RANK=0 \
      MASTER_ADDR="${addr[0]}" MASTER_PORT=$((29400 + round)) \
      GLOO_SOCKET_IFNAME=lan0 OMP_NUM_THREADS=1 WHERE_PEER=gloo \
      "$WORK/bin/where" "$PY" "$HERE/gloo_allreduce.py" --worker --sizes "$SIZES" \
      >"$WORK/gloo-rank$i.run" 2>&1 &
    pids+=($!)
  done
  wait_ranks "${pids[@]}"
  rc=$?
  cat "$WORK"/gloo-rank*.run
  cat "$WORK"/gloo-rank*.run | check_where >/dev/null || rc=1
  return $rc
}

peer_loom() { # off|on
  local tls=$1 spec=$WORK/loom-tls-$1.yaml ns addr out jid jd coord cpid secret i
  local peer=loom
  [ "$tls" = on ] && peer=loom_tls
  local pids=() rc state
  read -r -a ns <<<"$HOSTS_NS"
  read -r -a addr <<<"$HOSTS_ADDRS"
  # the coordinator (by loom submit), the agents and the tasks all see it
  export LOOM_HOME=$WORK/loom-home LOOM_TLS=$tls TMPDIR=$WORK/tmp NO_COLOR=1
  unset LOOM_COORD LOOM_SECRET LOOM_TASK LOOM_ATTEMPT LOOM_COMM_TRANSPORT
  mkdir -p "$LOOM_HOME" "$TMPDIR"
  local kv more=
  for kv in ${BENCH_LOOM_ENV:-}; do
    export "${kv?}"
    more+=", ${kv%%=*}: \"${kv#*=}\""
  done
  cat >"$spec" <<YAML
# generated by bench/allreduce/hosts.sh
name: bench-allreduce-hosts-tls-$tls
backend: external
env: {OMP_NUM_THREADS: "1", LOOM_COMM_TRANSPORT: "tcp", LOOM_TLS: "$tls", WHERE_PEER: "$peer"$more}
roles:
  worker:
    instances: $N
    command: ["$WORK/bin/where", "$WORK/bin/loom_allreduce", "--sizes", "$SIZES"]
YAML
  if ! out=$(ip netns exec "${ns[0]}" "$BUILD/loom" submit "$spec" --bind "${addr[0]}" 2>&1); then
    echo "loom submit failed: $out"
    return 1
  fi
  jid=$(echo "$out" | tail -n 1)
  jd=$LOOM_HOME/jobs/$jid
  coord=$(sed -n 's/.*"addr": *"\([^"]*\)".*/\1/p' "$jd/coord.json")
  cpid=$(sed -n 's/.*"pid": *\([0-9]*\).*/\1/p' "$jd/coord.json")
  secret=$(cat "$jd/secret")
  if [ -z "$coord" ] || [ -z "$cpid" ] || [ -z "$secret" ]; then
    echo "job $jid: no coordinator address, pid or secret in $jd"
    return 1
  fi
  echo "# loom job $jid, coordinator $coord (pid $cpid), LOOM_TLS=$tls"
  trap 'kill ${pids[*]} $cpid 2>/dev/null; exit 143' TERM
  for ((i = 0; i < N; i++)); do
    LOOM_COORD=$coord LOOM_SECRET=$secret LOOM_TASK=worker:$i LOOM_ATTEMPT=0 \
      ip netns exec "${ns[$i]}" "$BUILD/loom" agent >"$WORK/loom-$tls-agent$i.run" 2>&1 &
    pids+=($!)
  done
  # LOOM_TLS as the coordinator and the agents have it (the tasks' is on
  # their "# where" lines)
  sleep 0.2
  echo "# LOOM_TLS of the coordinator: $(env_of "$cpid" LOOM_TLS); of the agents: $(for p in "${pids[@]}"; do env_of "$p" LOOM_TLS; done | tr '\n' ' ')"
  wait_ranks "${pids[@]}"
  rc=$?
  # the coordinator ends once every task has; wait for it to write the end
  for _ in $(seq 100); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
  state=$(sed -n 's/^ *"state": *"\([a-z]*\)".*/\1/p' "$jd/state.json" | head -n 1)
  cat "$jd/logs/all.log"
  check_where <"$jd/logs/all.log" >/dev/null || rc=1
  if [ "$state" != succeeded ]; then
    echo "job $jid: $state; agents' last words:"
    tail -n 3 "$WORK"/loom-"$tls"-agent*.run
    [ "$rc" = 0 ] && rc=1
  fi
  return $rc
}

if [ "${1:-}" = --peer-run ]; then
  case $2 in
  mpi) peer_mpi ;;
  gloo) peer_gloo ;;
  loom) peer_loom off ;;
  loom_tls) peer_loom on ;;
  *) echo "unknown peer $2" >&2; exit 2 ;;
  esac
  exit
fi

# ---- the run -----------------------------------------------------------------
if [ "$(id -u)" != 0 ]; then
  echo "hosts.sh: needs root (it makes network namespaces): sudo $0" >&2
  exit 2
fi
if ! command -v ip >/dev/null; then
  echo "hosts.sh: needs ip(8) from iproute2" >&2
  exit 2
fi

WORK=$(mktemp -d /tmp/loom-bench-hosts.XXXXXX)
RAW=$WORK/raw.txt
: >"$RAW"
. "$HERE/common.sh"

TAG=lmbh$$
K=$((16 + $$ % 224))
HUB=$TAG-hub
NS=() ADDRS=()
for ((i = 0; i < N; i++)); do
  NS+=("$TAG-h$i")
  ADDRS+=("10.79.$K.$((i + 1))")
done
MADE=() # namespaces made so far, deleted in reverse order

# Kills every process in our namespaces (SIGKILL) and waits for them to go.
reap() { # label
  local ns pids all=
  for ns in "${MADE[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// /}" ] || continue
    all="$all $ns:[${pids% }]"
    kill -KILL $pids 2>/dev/null
  done
  [ -n "$all" ] || return 0
  log "$1: killed what was left in the namespaces:$all"
  for ns in "${MADE[@]}"; do
    for _ in $(seq 100); do
      [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
      sleep 0.1
    done
  done
}

cleanup() {
  local rc=$? left ns
  trap '' INT TERM HUP
  stop_peer
  reap "cleanup"
  for ((j = ${#MADE[@]} - 1; j >= 0; j--)); do
    ip netns del "${MADE[$j]}" 2>&1 | sed 's/^/# ip netns del: /' >&2
  done
  MADE=()
  kill_work_bin
  left=$( (ip netns list; ip -o link) 2>/dev/null | grep "$TAG")
  left+=$(pgrep -a -f "$WORK/" 2>/dev/null | grep -v "^$$ ")
  if [ -n "$left" ]; then
    log "cleanup: LEFT BEHIND: $left"
    rc=3
  else
    log "cleanup: no namespace, link or process of this run is left"
  fi
  remove_work
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---- hosts -------------------------------------------------------------------
mkns() {
  ip netns add "$1" && MADE+=("$1") && ip -n "$1" link set lo up
}
make_hosts() {
  mkns "$HUB" || return 1
  ip -n "$HUB" link add br0 type bridge && ip -n "$HUB" link set br0 up || return 1
  for ((i = 0; i < N; i++)); do
    mkns "${NS[$i]}" &&
      ip -n "$HUB" link add "p$i" type veth peer name lan0 netns "${NS[$i]}" &&
      ip -n "$HUB" link set "p$i" master br0 &&
      ip -n "$HUB" link set "p$i" up &&
      ip -n "${NS[$i]}" addr add "${ADDRS[$i]}/24" dev lan0 &&
      ip -n "${NS[$i]}" link set lan0 up || return 1
  done
}
log "work directory $WORK; build directory $BUILD"
if ! make_hosts 2>"$WORK/hosts.err"; then
  echo "hosts.sh: could not make the network namespaces: $(cat "$WORK/hosts.err")" >&2
  exit 3
fi
export HOSTS_NS="${NS[*]}" HOSTS_ADDRS="${ADDRS[*]}" HOSTS_CIDR=10.79.$K.0/24
export WORK BUILD SIZES N round
log "hosts: ${NS[*]} at ${ADDRS[*]} (lan0, bridged in $HUB)"

# ---- build -------------------------------------------------------------------
has_peer() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }
configure_build
loom_reason= loom_tls_reason= mpi_reason= gloo_reason=
if has_peer loom || has_peer loom_tls; then
  build_loom
  loom_tls_reason=$loom_reason
fi
has_peer mpi && build_mpi
has_peer gloo && check_gloo

# Says where each rank runs: "# where peer=P rank=R netns=NS addr=A cpus=C"
# on stderr, then runs its arguments.
cat >"$WORK/bin/where" <<'EOF'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-${LOOM_RANK:-${RANK:-?}}}
echo "# where peer=${WHERE_PEER:-?} rank=$r netns=$(ip netns identify $$) addr=$(ip -o -4 addr show dev lan0 | sed -n 's/.* inet \([^ ]*\).*/\1/p') cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)${LOOM_TLS:+ LOOM_TLS=$LOOM_TLS}" >&2
exec "$@"
EOF
# Open MPI's rsh launcher runs `AGENT HOST COMMAND...` to start its daemon on
# HOST: here HOST is a bridge address and the "remote shell" ip netns exec.
{
  echo '#!/bin/sh'
  echo 'host=$1; shift'
  echo 'case $host in'
  for ((i = 0; i < N; i++)); do echo "${ADDRS[$i]}) ns=${NS[$i]} ;;"; done
  echo '*) echo "rsh-netns: unknown host $host" >&2; exit 255 ;;'
  echo 'esac'
  echo 'exec ip netns exec "$ns" /bin/sh -c "$*"'
} >"$WORK/bin/rsh-netns"
chmod +x "$WORK/bin/where" "$WORK/bin/rsh-netns"
for ((i = 0; i < N; i++)); do echo "${ADDRS[$i]} slots=1"; done >"$WORK/hostfile"

# Does this build of loom know LOOM_TLS? (Until it does, loom_tls runs plain.)
tls_note="# loom_tls: this build of loom does not know LOOM_TLS (not in \`loom help tunables\` nor in the bench program): loom_tls ran plain TCP like loom, so its tls_cost is noise"
if [ -z "$loom_reason" ] && "$BUILD/loom" help tunables 2>/dev/null | grep -q LOOM_TLS &&
  grep -q -a LOOM_TLS "$WORK/bin/loom_allreduce"; then
  tls_note="# loom_tls: this build of loom knows LOOM_TLS (in \`loom help tunables\` and the bench program)"
fi
log "${tls_note#\# }"

# ---- rounds ------------------------------------------------------------------
RUNS=()
for p in mpi gloo loom loom_tls; do has_peer $p && RUNS+=("$p"); done
: >"$WORK/load.txt"
: >"$WORK/where.txt"
for round in $(seq 1 "$ROUNDS"); do
  wait_idle "$([ "$round" = 1 ] && echo "${BENCH_WAIT_IDLE:-30}" || echo 10)" "before round $round"
  k=${#RUNS[@]}
  for ((i = 0; i < k; i++)); do
    p=${RUNS[$(((i + (round - 1) * k / ROUNDS) % k))]}
    eval "reason=\${${p}_reason}"
    if [ -n "$reason" ]; then
      [ "$round" = 1 ] && skip "$p" tcp $N "$reason"
      continue
    fi
    run_peer "$p" tcp $N -- "$0" --peer-run "$p"
    reap "after $p in round $round"
    [ "$round" = 1 ] &&
      sed -n 's/^\(\[[^]]*\] \)\{0,1\}\(# \(where\|LOOM_TLS of\) .*\)$/\2/p' "$WORK/$p-tcp-$N-round$round.out" |
      sort -u >>"$WORK/where.txt"
  done
done

# ---- report ------------------------------------------------------------------
machine "after the run" "$(busy_pct)" >>"$WORK/load.txt"
{
  echo "$tls_note"
  echo "# hosts: ${NS[*]} at ${ADDRS[*]}, one rank each; where the ranks of round 1 ran:"
  sed 's/^# \(where \)\{0,1\}/#   /' "$WORK/where.txt"
  cat "$WORK/load.txt"
} >"$WORK/comments.txt"
"$PY" "$HERE/report_hosts.py" "$RAW" "$WORK/comments.txt"
