#!/usr/bin/env bash
# bench/hdfs/run.sh: loom's HDFS client (C, `loom fs`) next to Hadoop's own
# Java client, on one real HDFS (scripts/yarn-cluster.sh: a NameNode and
# two DataNodes, replication 2, each its own JVM, on 127.0.0.1), in one
# run, page cache warm. The data: N files (default 8) of FILE_MB MiB
# (default 128: one block each, 1 GiB in all) of random bytes, made once
# in a local temp directory and written once to /bench with the Java client.
#
#   name=hdfs_read peer=loom|java|java_fsshell n=8 bytes=1073741824 rounds=5 median_s=... mib_s=...
#   name=hdfs_read_ratio peer=java n=8 ratio=... target=1.0
#   name=hdfs_read_ratio peer=java_fsshell n=8 ratio=...
#   name=hdfs_read peer=loom_feed ...         loom's feed delivering the records
#   name=hdfs_read_ratio peer=loom_feed n=8 ratio=... of=loom_fs_cat   (fs cat's time / the feed's)
#   name=hdfs_feed_ratio peer=java n=8 ratio=...   (java's read / the feed's)
#   name=hdfs_read peer=pyarrow skipped=REASON            (or its figures, if it can run here)
#   name=hdfs_write peer=loom|java|java_fsshell n=8 bytes=... rounds=5 median_s=... mib_s=...
#   name=hdfs_write_ratio peer=java n=8 ratio=... target=1.0
#   name=hdfs_write_ratio peer=java_fsshell n=8 ratio=...
#   name=hdfs_java_setup peer=java rounds=... median_s=...  (what the java peer's times leave out)
#
# read, loom:  `loom fs cat hdfs://127.0.0.1:PORT/bench/f0 ... f7 >/dev/null`, the whole command.
# read, java:  HdfsBench.java `read`: FileSystem.get(conf), then every file
#              through a 1 MiB buffer; only that loop is timed (opens
#              included), not the JVM's start nor FileSystem.get (that is
#              hdfs_java_setup).
# read, java_fsshell: `hadoop fs -cat` as the hadoop script runs it: java
#              org.apache.hadoop.fs.FsShell -cat /bench/f0 ... >/dev/null,
#              the whole command, JVM start included.
# write, loom: `loom fs put -f data/fI hdfs://127.0.0.1:PORT/w/loom/fI`, one
#              command per file, all N timed together.
# write, java: HdfsBench.java `write`: FileSystem.create(overwrite) and the
#              local file's bytes through a 1 MiB buffer, close; the loop only.
# write, java_fsshell: `hadoop fs -put -f data/f0 ... /w/java_fsshell/`,
#              the whole command.
# Every write overwrites the same N paths of its peer (replication 2, the
# cluster's dfs.replication). ratio = the peer's median / loom's (> 1:
# loom is better); target 1.0: the Java client's own loop, the bar.
# All read rounds come first, then the write rounds (writeback of the
# written blocks stays out of the reads). Medians over BENCH_ROUNDS rounds
# after one warm-up round; each round runs every peer once, in an order
# that rotates from round to round. Before the rounds, loom's bytes are
# checked (`loom fs cat` of all files against the local files' SHA-256);
# after them, every file loom wrote (length, replication 2, SHA-256, read
# back by the Java client). Progress goes to stderr. This is a
# measurement: it fails only when a run fails (a command's exit status, a
# wrong byte count or checksum), never on a figure.
#
# Environment (all optional):
#   LOOM_BUILD_DIR   the CMake build directory (default build/)
#   BENCH_ROUNDS     rounds counted (default 5)
#   BENCH_N          files (default 8)
#   BENCH_FILE_MB    MiB per file (default 128)
#   BENCH_PEERS      default "loom java java_fsshell" (pyarrow is added when it can run here)
#   BENCH_JAVA_OPTS  JVM options of the Java client's commands (default: none, the JVM's defaults)
#   BENCH_TIMEOUT    seconds one command may take (default 300)
#   BENCH_KEEP=1     keep the work directory (logs, the cluster's logs)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
LOOM=$BUILD/loom
ROUNDS=${BENCH_ROUNDS:-5}
N=${BENCH_N:-8}
FILE_MB=${BENCH_FILE_MB:-128}
PEERS=${BENCH_PEERS:-loom java java_fsshell}
read -ra JAVA_OPTS <<<"${BENCH_JAVA_OPTS:-}"
TIMEOUT=${BENCH_TIMEOUT:-300}
BYTES=$((N * FILE_MB * 1024 * 1024))
JPROG=$HERE/HdfsBench.java

say() { echo "bench/hdfs: $*" >&2; }
die() { say "$*"; exit 1; }

has() { case " $PEERS " in *" $1 "*) return 0 ;; esac; return 1; }
if has loom; then
  [ -x "$LOOM" ] || { say "$LOOM not found: build first (cmake -S $ROOT -B $BUILD && cmake --build $BUILD)"; exit 2; }
  if "$LOOM" fs --help 2>&1 | grep -q "unknown verb 'fs'"; then say "$LOOM has no \`fs\` verb: build a newer tree"; exit 2; fi
fi
[ -n "${EPOCHREALTIME:-}" ] || { say "needs bash >= 5 (EPOCHREALTIME)"; exit 2; }
for c in java curl python3 sha256sum; do command -v $c >/dev/null || { say "$c not found"; exit 2; }; done

TMP=$(mktemp -d /tmp/loom-bench-hdfs.XXXXXX)
CDIR=$TMP/cluster
CHILD= # the command in progress (timeout, then loom or java)

# Processes working in this bench's cluster directory (the daemons run
# there): none may outlive the bench.
strays() {
  local p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case $cwd in "$CDIR" | "$CDIR"/*) echo "${p#/proc/}" ;; esac
  done
}

cleanup() {
  local rc=$? p
  set +e
  if [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null; then
    for _ in $(seq 100); do kill -0 "$CHILD" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$CHILD" 2>/dev/null
  fi
  if [ -d "$CDIR/pids" ]; then "$ROOT/scripts/yarn-cluster.sh" stop "$CDIR" >/dev/null 2>&1; fi
  for p in $(strays); do
    say "process $p outlived its cluster ($(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-100)): killing it"
    kill -KILL "$p" 2>/dev/null
  done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then say "kept $TMP"; else rm -rf "$TMP"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# NameNode and DataNodes only where the script can (no YARN is needed here).
MODE=--hdfs
grep -q -- '--hdfs-only' "$ROOT/scripts/yarn-cluster.sh" && MODE=--hdfs-only
say "starting HDFS ($MODE) in $CDIR (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$ROOT/scripts/yarn-cluster.sh" start "$MODE" "$CDIR" >/dev/null
CONF=$CDIR/conf
export HADOOP_CONF_DIR=$CONF
NN=hdfs://127.0.0.1:$(awk '$1 == "namenode" {print $2}' "$CDIR/ports")

# Hadoop's jars as the script resolves them (its cache, or LOOM_YARN_CLASSPATH).
HCP=$("$ROOT/scripts/yarn-cluster.sh" classpath)
JCP=$CONF:$HCP
jv() { java "${JAVA_OPTS[@]}" -cp "$JCP" "$@"; }

mkdir -p "$TMP/data" "$TMP/out"
LOCAL=()
PATHS=()
URLS=()
for i in $(seq 0 $((N - 1))); do
  LOCAL+=("$TMP/data/f$i")
  PATHS+=("/bench/f$i")
  URLS+=("$NN/bench/f$i")
done
say "writing $N local files of $FILE_MB MiB of random bytes"
for f in "${LOCAL[@]}"; do head -c "${FILE_MB}M" /dev/urandom >"$f"; done
SUM=$(cat "${LOCAL[@]}" | sha256sum | cut -d' ' -f1)
say "writing them to $NN/bench with the Java client"
jv "$JPROG" write /bench "${LOCAL[@]}" >"$TMP/out/setup" 2>"$TMP/out/setup.err" ||
  { tail -20 "$TMP/out/setup.err" >&2; die "the Java client could not write /bench"; }
jv "$JPROG" mkdir /w/loom /w/java /w/java_fsshell >/dev/null 2>>"$TMP/out/setup.err" ||
  { tail -20 "$TMP/out/setup.err" >&2; die "the Java client could not make /w"; }

if has loom; then
  say "checking loom's bytes: loom fs cat of the $N files against the local files"
  got=$("$LOOM" fs cat "${URLS[@]}" 2>"$TMP/out/check.err" | sha256sum | cut -d' ' -f1)
  [ "${PIPESTATUS[0]}" = 0 ] || { tail -20 "$TMP/out/check.err" >&2; die "loom fs cat failed"; }
  [ "$got" = "$SUM" ] || die "loom fs cat gave other bytes (sha256 $got, the files' $SUM)"
fi

# pyarrow's HadoopFileSystem drives the Java client through libhdfs.so
# (JNI), which Hadoop's tarball has and its Maven jars do not.
pyarrow_skip() {
  local why=() d
  python3 -c 'import pyarrow.fs' 2>/dev/null || why+=(pyarrow_not_installed)
  local found=
  for d in "${ARROW_LIBHDFS_DIR:-}" "${HADOOP_HOME:+$HADOOP_HOME/lib/native}"; do
    [ -n "$d" ] && [ -e "$d/libhdfs.so" ] && found=1
  done
  [ -z "$found" ] && ldconfig -p 2>/dev/null | grep -q 'libhdfs\.so' && found=1
  [ -z "$found" ] && why+=(no_libhdfs.so_JNI_library_not_in_Hadoop_Maven_jars)
  if [ ${#why[@]} = 0 ]; then
    CLASSPATH=$JCP python3 -c 'import sys, pyarrow.fs; pyarrow.fs.HadoopFileSystem("127.0.0.1", int(sys.argv[1]))' \
      "${NN##*:}" >/dev/null 2>"$TMP/out/pyarrow.err" || why+=(HadoopFileSystem_failed:"$(tail -1 "$TMP/out/pyarrow.err" | tr ' ' _ | cut -c1-100)")
  fi
  local IFS=,
  echo "${why[*]}"
}
PYARROW_SKIP=$(pyarrow_skip)
read -ra RPEERS <<<"$PEERS"
if [ -z "$PYARROW_SKIP" ]; then RPEERS+=(pyarrow); else say "pyarrow skipped: $PYARROW_SKIP"; fi
WPEERS=()
for p in $PEERS; do WPEERS+=("$p"); done

# loom's feed delivering records from the same files (figure (e)): a
# one-worker job whose task reads the feed (fixed 64 KiB records) to the
# end with loom_feed_next_batch; the time is the task's own, from
# loom_feed_open to the last record (job start-up excluded), as bench/feed
# times it.
FEEDBENCH=$BUILD/bench/feed/feedbench
if has loom && [ -x "$FEEDBENCH" ]; then
  RPEERS+=(loom_feed)
  cat >"$TMP/feed.yaml" <<EOF
name: hdfsfeedbench
env: {HADOOP_CONF_DIR: "$CONF"}
roles:
  worker: {command: ["$FEEDBENCH", feed, "16"]}
feed: {input: ["$NN/bench/f*"], format: "fixed:65536"}
EOF
fi


# Runs "$@" under timeout, in the background so that a signal reaches the
# exit trap at once; stdout to $OUTF, stderr to $ERRF. Sets SECS to the
# command's wall time; fails the bench if it fails.
OUTF=
ERRF=
timed() {
  local t0 t1 rc=0
  t0=$EPOCHREALTIME
  timeout "$TIMEOUT" "$@" >"$OUTF" 2>"$ERRF" &
  CHILD=$!
  wait $CHILD || rc=$?
  CHILD=
  t1=$EPOCHREALTIME
  SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.6f", b - a}')
  if [ $rc != 0 ]; then
    tail -20 "$ERRF" >&2
    die "exit status $rc: $* (above: its last lines)"
  fi
}
field() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" "$2"; }
# the java peer's own line: bytes must be all of them; SECS the loop's time
java_figure() { # key
  local b
  b=$(field bytes "$OUTF")
  [ "$b" = "$BYTES" ] || die "the Java client moved $b bytes, not $BYTES"
  SECS=$(field "$1" "$OUTF")
  echo "java_setup $(field setup_s "$OUTF")" >>"$RESULTS"
}

read_one() { # peer round
  local peer=$1
  OUTF=$TMP/out/read-$1-$2
  ERRF=$OUTF.err
  case $peer in
  loom)
    OUTF=/dev/null
    timed "$LOOM" fs cat "${URLS[@]}"
    ;;
  java)
    timed java "${JAVA_OPTS[@]}" -cp "$JCP" "$JPROG" read "${PATHS[@]}"
    java_figure read_s
    ;;
  loom_feed)
    timed "$LOOM" run "$TMP/feed.yaml"
    local fb
    fb=$(field bytes "$OUTF" | head -1)
    [ "$fb" = "$BYTES" ] || die "the feed delivered $fb bytes, not $BYTES"
    SECS=$(field seconds "$OUTF" | head -1)
    ;;
  java_fsshell)
    OUTF=/dev/null
    timed java "${JAVA_OPTS[@]}" -cp "$JCP" org.apache.hadoop.fs.FsShell -cat "${PATHS[@]}"
    ;;
  pyarrow)
    CLASSPATH=$JCP timed python3 "$TMP/pyarrow_read.py" "${NN##*:}" "${PATHS[@]}"
    local b
    b=$(field bytes "$OUTF")
    [ "$b" = "$BYTES" ] || die "pyarrow read $b bytes, not $BYTES"
    SECS=$(field read_s "$OUTF")
    ;;
  *) die "unknown read peer $peer" ;;
  esac
  echo "$peer $SECS" >>"$RESULTS"
  say "read round $2 $peer: ${SECS}s"
}

# pyarrow's side of a read round (if it can run here): the loop only, as java's.
cat >"$TMP/pyarrow_read.py" <<'EOF'
import sys, time, pyarrow.fs
fs = pyarrow.fs.HadoopFileSystem("127.0.0.1", int(sys.argv[1]))
n, t0 = 0, time.perf_counter()
for p in sys.argv[2:]:
    with fs.open_input_stream(p) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
print("bytes=%d read_s=%.6f" % (n, time.perf_counter() - t0))
EOF

write_one() { # peer round
  local peer=$1 i
  OUTF=$TMP/out/write-$1-$2
  ERRF=$OUTF.err
  case $peer in
  loom)
    local t0=$EPOCHREALTIME
    for i in $(seq 0 $((N - 1))); do
      timed "$LOOM" fs put -f "${LOCAL[$i]}" "$NN/w/loom/f$i"
    done
    SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.6f", b - a}')
    ;;
  java)
    timed java "${JAVA_OPTS[@]}" -cp "$JCP" "$JPROG" write /w/java "${LOCAL[@]}"
    java_figure write_s
    ;;
  java_fsshell) timed java "${JAVA_OPTS[@]}" -cp "$JCP" org.apache.hadoop.fs.FsShell -put -f "${LOCAL[@]}" /w/java_fsshell/ ;;
  *) die "unknown write peer $peer" ;;
  esac
  echo "$peer $SECS" >>"$RESULTS"
  say "write round $2 $peer: ${SECS}s"
}

# rounds: $1 read|write, then the peers
rounds() {
  local what=$1 r k
  shift
  local P=("$@")
  RESULTS=$TMP/$what-warmup.txt
  say "$what: warm-up round (not counted)"
  for p in "${P[@]}"; do "${what}_one" "$p" 0; done
  RESULTS=$TMP/$what.txt
  : >"$RESULTS"
  for r in $(seq "$ROUNDS"); do
    for k in $(seq 0 $((${#P[@]} - 1))); do
      "${what}_one" "${P[$(((k + r) % ${#P[@]}))]}" "$r"
    done
  done
}

rounds read "${RPEERS[@]}"
rounds write "${WPEERS[@]}"

if has loom; then
  say "checking what loom wrote: length, replication and SHA-256 of /w/loom/f*, read back by the Java client"
  OUTF=$TMP/out/check-write
  ERRF=$OUTF.err
  timed java "${JAVA_OPTS[@]}" -cp "$JCP" "$JPROG" check $(for i in $(seq 0 $((N - 1))); do echo /w/loom/f$i; done)
  for i in $(seq 0 $((N - 1))); do
    want="/w/loom/f$i len=$((FILE_MB * 1024 * 1024)) replication=2 sha256=$(sha256sum <"${LOCAL[$i]}" | cut -d' ' -f1)"
    grep -qxF "$want" "$OUTF" || die "loom's /w/loom/f$i is not what was put: $(grep "^/w/loom/f$i " "$OUTF"), want $want"
  done
fi
say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# the median of the numbers on stdin, with $1 decimals
median() { sort -g | awk -v d="$1" '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "%.*f\n", d, m}'; }
med() { awk -v p="$2" '$1 == p {print $2}' "$TMP/$1.txt" | median "${3:-3}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
mibs() { awk -v s="$1" -v b="$BYTES" 'BEGIN {printf "%.1f", b / 1048576 / s}'; }

for what in read write; do
  if [ $what = read ]; then P=("${RPEERS[@]}"); else P=("${WPEERS[@]}"); fi
  for p in "${P[@]}"; do
    m=$(med $what "$p")
    echo "name=hdfs_$what peer=$p n=$N bytes=$BYTES rounds=$ROUNDS median_s=$m mib_s=$(mibs "$m")"
  done
  [ $what = read ] && [ -n "$PYARROW_SKIP" ] && echo "name=hdfs_read peer=pyarrow skipped=$PYARROW_SKIP"
  has loom || continue
  for p in "${P[@]}"; do
    [ "$p" = loom ] && continue
    extra=""
    [ "$p" = java ] && extra=" target=1.0"
    if [ "$p" = loom_feed ]; then
      # the feed against its ceiling, loom's plain client (< 1: slower), and
      # against the Java client reading the bytes alone (> 1: faster)
      echo "name=hdfs_read_ratio peer=loom_feed n=$N ratio=$(ratio "$(med $what loom 6)" "$(med $what loom_feed 6)") of=loom_fs_cat"
      case " ${P[*]} " in *" java "*)
        echo "name=hdfs_feed_ratio peer=java n=$N ratio=$(ratio "$(med $what java 6)" "$(med $what loom_feed 6)")" ;;
      esac
      continue
    fi
    echo "name=hdfs_${what}_ratio peer=$p n=$N ratio=$(ratio "$(med $what "$p" 6)" "$(med $what loom 6)")$extra"
  done
done
if has java; then
  echo "name=hdfs_java_setup peer=java rounds=$((2 * ROUNDS)) median_s=$(cat "$TMP/read.txt" "$TMP/write.txt" | awk '$1 == "java_setup" {print $2}' | median 3)"
fi
