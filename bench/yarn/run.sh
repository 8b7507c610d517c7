#!/usr/bin/env bash
# bench/yarn/run.sh: loom's YARN backend (its coordinator is an unmanaged
# application master in C) next to skein (a Java driver and a Java
# application master), on one real YARN (scripts/yarn-cluster.sh start
# --hdfs: a ResourceManager, two NodeManagers, a NameNode and two
# DataNodes, each its own JVM), in one run. Each side starts N containers
# (default 8) of 128 MB and 1 vcore that each append `date +%s.%N` to a file
# of its own on this host and exit.
#
#   name=yarn_all_running peer=loom|skein|skein_warm_driver n=8 rounds=5 median_s=...
#   name=yarn_all_running_ratio peer=skein|skein_warm_driver n=8 ratio=... target=5
#   name=yarn_end peer=... n=8 rounds=5 median_s=...
#   name=yarn_end_ratio peer=... n=8 ratio=...
#   name=yarn_am_rss peer=loom|skein n=8 rounds=5 bytes=...
#   name=yarn_am_rss_ratio peer=skein n=8 ratio=...
#   name=yarn_client_rss peer=loom|skein n=8 rounds=5 bytes=...
#   name=yarn_client_rss_ratio peer=skein n=8 ratio=...
#   name=yarn_stage peer=loom cache=cold|warm n=... bytes=... median_s=...
#
# (with BENCH_HOSTS=1 each name ends in _hosts). stage: loom's executable
# staged in the per-user cache (its binary_shipped event): the first job's
# (cold) and the median of the rest (warm).
# all_running: the last of the N timestamps less the command's start;
# end: the command's return less its start (bash's EPOCHREALTIME, the same
# clock as `date`). The commands: `build/loom run b8.yaml` (backend: yarn;
# it returns when the job has ended and the application unregistered), and
# `python skein_job.py` (starts skein's driver, submits, polls skein's
# application report until YARN says FINISHED, stops the driver).
# skein_warm_driver: the same with skein's global driver already running
# (`skein driver start` before the rounds), as a skein user may keep one.
# ratio = skein's median / loom's (> 1: loom is better); target 5 is the
# issue's goal for all-running. am_rss: the median over rounds of the peak
# resident memory (VmHWM) of the application master: loom's `loom run`
# process (client, coordinator and AM in one) and skein's AM JVM in its
# container. client_rss: the peak summed RSS of what runs on the client for
# the command: `loom run` again, and skein's python plus its driver JVM.
# Medians over BENCH_ROUNDS rounds after one warm-up round; each round
# runs every peer once, in an order that rotates from round to round.
# Progress goes to stderr. This is a measurement: it fails only when a run
# fails (a job or an application that did not succeed, a missing
# timestamp), never on a figure.
#
# Environment (all optional):
#   LOOM_BUILD_DIR        the CMake build directory (default build/)
#   BENCH_ROUNDS          rounds counted (default 5)
#   BENCH_N               containers per run (default 8)
#   BENCH_TASK_MB         memory of each container, MB (default 128)
#   BENCH_PEERS           default "loom skein skein_warm_driver"
#   BENCH_SKEIN_JAVA_OPTS JVM options for skein's driver and AM (default
#                         "-XX:+UseSerialGC -XX:TieredStopAtLevel=1", the quick
#                         start yarn-cluster.sh gives Hadoop's own daemons)
#   BENCH_TIMEOUT         seconds one run may take (default 300)
#   BENCH_HOSTS=1         the cluster on hosts of their own (hosts.py: the
#                         system tests' HadoopHosts, network namespaces whose
#                         NodeManagers see nothing of loom), the client this
#                         machine; the figures' names get _hosts
#   BENCH_KEEP=1          keep the work directory (logs, job directories)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
LOOM=$BUILD/loom
ROUNDS=${BENCH_ROUNDS:-5}
N=${BENCH_N:-8}
TASK_MB=${BENCH_TASK_MB:-128}
PEERS=${BENCH_PEERS:-loom skein skein_warm_driver}
SKEIN_JAVA_OPTS=${BENCH_SKEIN_JAVA_OPTS--XX:+UseSerialGC -XX:TieredStopAtLevel=1}
TIMEOUT=${BENCH_TIMEOUT:-300}
HOSTS=${BENCH_HOSTS:-0}
SUF=
[ "$HOSTS" = 1 ] && SUF=_hosts
AM_MB=512 # skein's default application master memory

say() { echo "bench/yarn: $*" >&2; }
die() { say "$*"; exit 1; }

[ -x "$LOOM" ] || { say "$LOOM not found: build first (cmake -S $ROOT -B $BUILD && cmake --build $BUILD)"; exit 2; }
[ -n "${EPOCHREALTIME:-}" ] || { say "needs bash >= 5 (EPOCHREALTIME)"; exit 2; }
for c in java curl python3; do command -v $c >/dev/null || { say "$c not found"; exit 2; }; done

SKEIN_PY=$("$HERE/setup-skein.sh")
SKEIN_VENV=$(dirname "$(dirname "$SKEIN_PY")")

TMP=$(mktemp -d /tmp/loom-bench-yarn.XXXXXX)
YDIR=$TMP/yarn
# where the tasks write their timestamps: on one host a directory of TMP;
# across hosts each node has its own /tmp, so a directory the nodes'
# mount namespaces do not hide (the one thing the bench shares with them:
# the same disk and the same clock, for the timestamps alone)
TSD=$TMP/ts
RM_HOST=127.0.0.1
HTAG=loomh$$
LOOM_ARGS=()
SAMPLERS=()
CHILD= # the run in progress (timeout, then loom run or skein_job.py)
WARM=0
RM_WEB=

# Lists this cluster's applications that are not over: "id state" lines.
live_apps() {
  [ -n "$RM_WEB" ] || return 0
  curl -sf --max-time 5 "http://$RM_HOST:$RM_WEB/ws/v1/cluster/apps?states=NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING" |
    python3 -c '
import json, sys
for a in ((json.load(sys.stdin).get("apps") or {}).get("app") or []):
    print(a["id"], a["state"])'
}

# Processes started inside this bench's cluster directory (containers run
# with their working directory there): none may outlive the bench.
strays() {
  local p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case $cwd in "$YDIR"/*) echo "${p#/proc/}" ;; esac
  done
}

cleanup() {
  local rc=$? p id st
  set +e
  for p in "${SAMPLERS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  if [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null; then
    # timeout passes the signal on: loom kills its job and unregisters,
    # skein_job.py kills its application
    for _ in $(seq 100); do kill -0 "$CHILD" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$CHILD" 2>/dev/null
  fi
  if [ "$WARM" = 1 ]; then
    local dpid
    dpid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["pid"])' \
      "$SK/config/driver" 2>/dev/null)
    # `skein driver stop` sends SIGTERM and does not wait
    env "${SKEIN_ENV[@]}" "$SKEIN_VENV/bin/skein" driver stop >/dev/null 2>&1
    if [ -n "$dpid" ]; then
      for _ in $(seq 100); do
        grep -qz com.anaconda.skein.Driver "/proc/$dpid/cmdline" 2>/dev/null || break
        sleep 0.1
      done
      if grep -qz com.anaconda.skein.Driver "/proc/$dpid/cmdline" 2>/dev/null; then
        say "skein's global driver (pid $dpid) did not stop within 10 s of SIGTERM: killing it"
        kill -KILL "$dpid" 2>/dev/null
      fi
    fi
  fi
  while read -r id st; do
    [ -n "$id" ] || continue
    say "killing application $id, still $st"
    curl -sf --max-time 5 -X PUT -H 'Content-Type: application/json' -d '{"state":"KILLED"}' \
      "http://$RM_HOST:$RM_WEB/ws/v1/cluster/apps/$id/state" >/dev/null
  done < <(live_apps)
  if [ "$HOSTS" = 1 ]; then
    python3 "$HERE/hosts.py" stop "$YDIR" "$HTAG" >"$TMP/hosts-stop.log" 2>&1 ||
      { say "stopping the hosts: $(tail -3 "$TMP/hosts-stop.log")"; rc=1; }
    [ "$TSD" = "$TMP/ts" ] || rm -rf "$TSD"
  elif [ -d "$YDIR/pids" ]; then "$ROOT/scripts/yarn-cluster.sh" stop "$YDIR" >/dev/null 2>&1; fi
  for p in $(strays); do
    say "process $p outlived its cluster ($(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-100)): killing it"
    kill -KILL "$p" 2>/dev/null
  done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Unrelated loom job variables must not leak into this bench's jobs.
unset LOOM_JOB_ID LOOM_JOB_DIR LOOM_COORD LOOM_SECRET LOOM_TASK LOOM_RANK LOOM_WORLD_SIZE
export LOOM_HOME=$TMP/home
# Hadoop's daemons pass JAVA_HOME on to the containers (skein's AM needs it).
export JAVA_HOME=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")}

if [ "$HOSTS" = 1 ]; then
  say "starting YARN and HDFS on 3 hosts in $YDIR (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  mkdir -p "$YDIR"
  read -r RM_HOST CLIENT_ADDR < <(python3 "$HERE/hosts.py" start "$YDIR" "$HTAG" 2>"$TMP/hosts.log" | tail -1) ||
    true
  [ -n "${CLIENT_ADDR:-}" ] || { tail -20 "$TMP/hosts.log" >&2; die "the hosts did not start"; }
  say "head $RM_HOST, client $CLIENT_ADDR"
  TSD=$(mktemp -d /var/tmp/loom-bench-yarn-ts.XXXXXX)
  # the coordinator listens where the nodes reach the client
  LOOM_ARGS=(--bind "$CLIENT_ADDR")
else
  say "starting YARN and HDFS in $YDIR (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  # The conf directory is YDIR/conf; the printed export line is not needed.
  "$ROOT/scripts/yarn-cluster.sh" start --hdfs "$YDIR" >/dev/null
fi
RM_WEB=$(awk '$1 == "web" {print $2}' "$YDIR/ports")
YCONF=$YDIR/conf

# Hadoop's jars as the script resolved them (its cache, or LOOM_YARN_CLASSPATH).
if [ -n "${LOOM_YARN_CLASSPATH:-}" ]; then
  HCP=$(cat "$LOOM_YARN_CLASSPATH")
else
  HCP=$(cat "${XDG_CACHE_HOME:-$HOME/.cache}/loom/hadoop-classpath-$(sha256sum "$ROOT/hadoop/pom.xml" | cut -c1-16).txt")
fi

# The script's NodeManagers have 2 and 4 vcores; N containers of 1 vcore
# (and skein's AM) need more at once, and loom holds its containers until
# it has all N (a gang). An administrator's resize of the unlabelled node
# (yarn rmadmin -updateNodeResource), on the running ResourceManager,
# gives the default partition room for skein's AM and N containers at once.
NM2=$(curl -sf --max-time 5 "http://$RM_HOST:$RM_WEB/ws/v1/cluster/nodes" | python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]["node"]:
    if not n.get("nodeLabels"):
        print(n["id"])')
VC=$((N + 1))
[ "$VC" -lt 4 ] && VC=4
MB=$((N * TASK_MB + AM_MB + 512))
[ "$MB" -lt 4096 ] && MB=4096
HADOOP_CONF_DIR=$YCONF java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$YCONF:$HCP" \
  org.apache.hadoop.yarn.client.cli.RMAdminCLI -updateNodeResource "$NM2" "$MB" "$VC" \
  >"$TMP/rmadmin.log" 2>&1 || { tail -20 "$TMP/rmadmin.log" >&2; die "could not resize node $NM2"; }
for _ in $(seq 100); do
  curl -sf --max-time 5 "http://$RM_HOST:$RM_WEB/ws/v1/cluster/nodes" | grep -q "\"vCores\":$VC" && break
  sleep 0.1
done
say "node $NM2 resized to $MB MB and $VC vcores"

# skein finds Hadoop through `yarn classpath --glob` on PATH and Java through
# JAVA_HOME. Its client configuration: the cluster's, plus the classpath
# its AM's container gets (yarn.application.classpath: the node's
# configuration directory, then the same jars the daemons run).
SK=$TMP/skein
mkdir -p "$SK/bin" "$SK/conf" "$SK/config"
cp "$YCONF"/* "$SK/conf/"
python3 - "$SK/conf/yarn-site.xml" "$HCP" <<'EOF'
import sys
path, cp = sys.argv[1], sys.argv[2]
s = open(path).read()
prop = ("  <property><name>yarn.application.classpath</name><value>$HADOOP_CONF_DIR,%s</value>"
        "</property>\n</configuration>" % cp.replace(":", ","))
open(path, "w").write(s.replace("</configuration>", prop))
EOF
cat >"$SK/bin/yarn" <<EOF
#!/bin/sh
# bench/yarn: what skein asks of Hadoop's yarn command: \`yarn classpath [--glob]\`
if [ "\$1" = classpath ]; then echo "$SK/conf:$HCP"; exit 0; fi
echo "bench/yarn: this yarn only prints the classpath (asked: \$*)" >&2
exit 2
EOF
chmod +x "$SK/bin/yarn"
SKEIN_ENV=(PATH="$SK/bin:$PATH" HADOOP_CONF_DIR="$SK/conf" SKEIN_CONFIG="$SK/config"
           SKEIN_DRIVER_JAVA_OPTIONS="$SKEIN_JAVA_OPTS")
SKEIN_ARGS=(--name b8 --instances "$N" --memory "$TASK_MB" --am-memory "$AM_MB")
[ -n "$SKEIN_JAVA_OPTS" ] && SKEIN_ARGS+=(--am-env "JAVA_TOOL_OPTIONS=$SKEIN_JAVA_OPTS")

case " $PEERS " in
*" skein_warm_driver "*)
  say "starting skein's global driver"
  WARM=1
  env "${SKEIN_ENV[@]}" "$SKEIN_VENV/bin/skein" driver start --log "$SK/driver-global.log" >/dev/null ||
    { tail -20 "$SK/driver-global.log" >&2; die "skein driver start failed"; }
  ;;
esac

mkdir -p "$TSD" "$TMP/out" "$TMP/rss"

# Starts the memory sampler (rss.py) writing to $1; its pid goes to SAMPLERS.
sampler() { # out-file rss.py-arguments...
  local out=$1
  shift
  python3 "$HERE/rss.py" "$@" >"$out" &
  SAMPLERS+=($!)
}
stop_samplers() {
  local p
  for p in "${SAMPLERS[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" || true; done
  SAMPLERS=()
}

# Seconds from $1 (EPOCHREALTIME) to the last timestamp in $2, which must
# have N lines.
last_start() {
  local n
  n=$(wc -l <"$2")
  [ "$n" = "$N" ] || return 1
  sort -g "$2" | tail -1 | awk -v t0="$1" '{printf "%.6f", $1 - t0}'
}
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.6f", b - a}'; }
field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" "$2"; }

# One run of peer $1, round $2: appends "peer all_running end am_hwm client_rss"
# to RESULTS.
run_one() {
  local peer=$1 r=$2 tag="$1-$2" t0 t1 rc=0 ts out
  ts=$TSD/$tag
  out=$TMP/out/$tag
  : >"$ts"
  if [ "$peer" = loom ]; then
    local spec=$TMP/b8-$tag.yaml
    printf 'name: b8\nbackend: yarn\nroles:\n  worker:\n    instances: %d\n    memory: %dMiB\n    vcores: 1\n    command: "date +%%s.%%N >> %s"\n' \
      "$N" "$TASK_MB" "$ts" >"$spec"
    rm -f "$TMP/loom.pid"
    sampler "$TMP/rss/$tag.am" --pidfiles "$TMP/loom.pid" --prefix "$LOOM run "
    sleep 0.3 # the sampler's own start stays out of the timing
    t0=$EPOCHREALTIME
    HADOOP_CONF_DIR=$YCONF timeout "$TIMEOUT" "$LOOM" run "${LOOM_ARGS[@]}" "$spec" >"$out" 2>&1 &
    CHILD=$!
    echo $CHILD >"$TMP/loom.pid"
    wait $CHILD || rc=$?
    CHILD=
    t1=$EPOCHREALTIME
    stop_samplers
    cp "$TMP/rss/$tag.am" "$TMP/rss/$tag.client"
    if [ $rc != 0 ]; then
      tail -20 "$out" >&2
      die "loom run failed (exit $rc) in round $r (above: its last lines; spec $spec)"
    fi
  else
    local glob=$YDIR/'nm*/local/nmPrivate/application_*/container_*_000001/container_*.pid'
    local args=("${SKEIN_ARGS[@]}" --script "date +%s.%N >> $ts" --timeout "$TIMEOUT")
    if [ "$peer" = skein_warm_driver ]; then args+=(--global-driver); else args+=(--driver-log "$out.driver"); fi
    rm -f "$TMP/skein.pid"
    sampler "$TMP/rss/$tag.am" --pidfiles "$glob" --prefix "$JAVA_HOME/bin/java " \
      --contains com.anaconda.skein.ApplicationMaster
    sampler "$TMP/rss/$tag.client" --pidfiles "$TMP/skein.pid" --prefix "$SKEIN_PY " \
      --prefix "$JAVA_HOME/bin/java "
    sleep 0.3
    t0=$EPOCHREALTIME
    env "${SKEIN_ENV[@]}" timeout "$((TIMEOUT + 30))" "$SKEIN_PY" "$HERE/skein_job.py" "${args[@]}" \
      >"$out" 2>"$out.err" &
    CHILD=$!
    echo $CHILD >"$TMP/skein.pid"
    wait $CHILD || rc=$?
    CHILD=
    t1=$EPOCHREALTIME
    stop_samplers
    if [ $rc != 0 ]; then
      tail -20 "$out.err" >&2
      [ -f "$out.driver" ] && grep -v deprecat "$out.driver" | tail -10 >&2
      die "skein failed (exit $rc) in round $r (above: its last lines)"
    fi
  fi
  local ar end hwm crss
  ar=$(last_start "$t0" "$ts") || die "$peer, round $r: $(wc -l <"$ts") timestamps in $ts, not $N"
  end=$(elapsed "$t0" "$t1")
  hwm=$(field hwm "$TMP/rss/$tag.am")
  crss=$(field rss "$TMP/rss/$tag.client")
  [ -n "$hwm" ] && [ "$hwm" != 0 ] || die "$peer, round $r: no AM process found to sample ($(cat "$TMP/rss/$tag.am"))"
  local live
  live=$(live_apps)
  [ -z "$live" ] || die "$peer, round $r: applications not over after the command returned: $live"
  # loom's staging of its executable (the binary_shipped event): bytes
  # uploaded to the cluster's per-user cache and milliseconds taken
  local stage="- -"
  if [ "$peer" = loom ]; then
    stage=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "binary_shipped":
        print(e["uploaded"], e["ms"])
        break' "$(ls -td "$LOOM_HOME"/jobs/*/ | head -1)events.jsonl")
    [ -n "$stage" ] || die "loom, round $r: no binary_shipped event in its job's events"
  fi
  echo "$peer $ar $end $hwm $crss $stage" >>"$RESULTS"
  local more=""
  if [ "$peer" != loom ]; then
    # skein_job.py's own milestones, from the command's start
    more=$(awk -v t0="$t0" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}}
      END {printf " (%s: driver up +%.2fs, submitted +%.2fs, report FINISHED +%.2fs)", v["app_id"],
           v["t_driver"] - t0, v["t_submitted"] - t0, v["t_finished"] - t0}' "$out")
  fi
  [ "$peer" = loom ] && more=" (its executable staged: ${stage% *} bytes uploaded, ${stage#* } ms)"
  say "round $r $peer: all running ${ar}s, end ${end}s, AM peak $((hwm / 1024)) KiB, client $((crss / 1024)) KiB$more"
}

read -ra P <<<"$PEERS"
RESULTS=$TMP/warmup.txt
say "warm-up round (not counted)"
for p in "${P[@]}"; do run_one "$p" 0; done
RESULTS=$TMP/results.txt
: >"$RESULTS"
for r in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((${#P[@]} - 1))); do
    run_one "${P[$(((k + r) % ${#P[@]}))]}" "$r"
  done
done
say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# the median of the numbers on stdin, with $1 decimals
median() { sort -g | awk -v d="$1" '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.*f\n", d, m}'; }
med() { awk -v p="$1" -v c="$2" '$1 == p {print $c}' "$RESULTS" | median "${3:-3}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

has() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }

for fig in all_running:2 end:3; do
  name=${fig%:*} col=${fig#*:}
  for p in "${P[@]}"; do
    echo "name=yarn_$name$SUF peer=$p n=$N rounds=$ROUNDS median_s=$(med "$p" "$col")"
  done
  has loom || continue
  for p in "${P[@]}"; do
    [ "$p" = loom ] && continue
    extra=""
    [ "$name" = all_running ] && extra=" target=5"
    echo "name=yarn_${name}${SUF}_ratio peer=$p n=$N ratio=$(ratio "$(med "$p" "$col")" "$(med loom "$col")")$extra"
  done
done
for fig in am_rss:4 client_rss:5; do
  name=${fig%:*} col=${fig#*:}
  for p in "${P[@]}"; do
    [ "$p" = skein_warm_driver ] && continue # the same AM as skein's; its driver is not in its tree
    echo "name=yarn_$name$SUF peer=$p n=$N rounds=$ROUNDS bytes=$(med "$p" "$col" 0)"
  done
  if has loom && has skein; then
    echo "name=yarn_${name}${SUF}_ratio peer=skein n=$N ratio=$(ratio "$(med skein "$col" 0)" "$(med loom "$col" 0)")"
  fi
done
# the first loom job on the new cluster (the warm-up round) staged loom's
# executable into the empty per-user cache; every later one found it there
if has loom; then
  read -r cb cms < <(awk '$1 == "loom" {print $6, $7}' "$TMP/warmup.txt")
  echo "name=yarn_stage$SUF peer=loom cache=cold n=1 bytes=$cb median_s=$(awk -v m="$cms" 'BEGIN {printf "%.3f", m / 1000}')"
  echo "name=yarn_stage$SUF peer=loom cache=warm n=$ROUNDS bytes=$(med loom 6 0) median_s=$(med loom 7 0 | awk '{printf "%.3f", $1 / 1000}')"
fi
