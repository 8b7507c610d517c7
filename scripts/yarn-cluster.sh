#!/usr/bin/env bash
# yarn-cluster.sh: a real Apache Hadoop YARN and HDFS on this machine, for
# trying loom's yarn backend and HDFS client and for their tests. Hadoop
# 3.5.0 comes from Maven Central through hadoop/pom.xml (no Hadoop install
# needed: java and mvn).
#
#   scripts/yarn-cluster.sh start [--hdfs | --hdfs-only] [DIR]  # prints: export HADOOP_CONF_DIR=DIR/conf
#   scripts/yarn-cluster.sh status [DIR]
#   scripts/yarn-cluster.sh stop [DIR]
#   scripts/yarn-cluster.sh datanode stop|start N [DIR]   # N: 1 or 2
#   scripts/yarn-cluster.sh nodemanager stop|start N [DIR]  # N: 1 or 2
#   scripts/yarn-cluster.sh rm stop|kill|start [DIR]       # kill: SIGKILL
#   scripts/yarn-cluster.sh classpath                      # Hadoop's jars, for a Java client
#   scripts/yarn-cluster.sh start --hdfs --hosts FILE [DIR]  # the daemons on hosts of their own
#   scripts/yarn-cluster.sh start --hdfs --protection privacy [DIR]  # hadoop.rpc.protection
#       (authentication: the default; integrity; privacy), after --hdfs/--hosts
#   scripts/yarn-cluster.sh start --hdfs-only [--protection P] [--data-protection P] [--encrypt-data A] --kerberos KDIR [DIR]
#       # a Kerberized HDFS (see "Kerberos" below)
#
# DIR defaults to $LOOM_HOME/yarn, or /tmp/loom-yarn-$USER without
# LOOM_HOME. `start` writes the configuration into DIR and starts a
# ResourceManager and two NodeManagers, each its own JVM (the classes
# bin/yarn runs) with its own configuration directory and log under DIR,
# on 127.0.0.1 and on ports picked free at start (DIR/ports). The
# CapacityScheduler with node labels: nm1 is labelled `gpu` (a
# non-exclusive label, in the queue's accessible labels) and has 2 of the
# countable resource yarn.io/gpu (scheduling only: no real GPU);
# timeouts are low so that a broken client fails in seconds. It returns
# when the RM's REST API lists both nodes RUNNING, or fails naming what it
# waited for. With --hdfs it also formats and starts a NameNode and two
# DataNodes (replication 2, permissions checked, each its own JVM) and
# makes hdfs://127.0.0.1:PORT the default filesystem; it then also waits
# until the NameNode has both DataNodes live and has left safe mode.
# --hdfs-only starts the NameNode and the two DataNodes alone (no YARN
# daemon, no yarn-site.xml), with the same waits. `stop` stops exactly the
# processes `start` recorded in DIR/pids and waits until they are gone.
#
# `datanode stop N` stops DataNode dnN cleanly (SIGTERM, as Hadoop's own
# scripts do) and returns when its process is gone; the NameNode notices
# only after its heartbeat recheck (about 30 s here). `datanode start N`
# starts it again with the same configuration, ports and data directory,
# and returns when it has registered with the NameNode and the NameNode
# has 2 live DataNodes again.
#
# `nodemanager stop N` stops NodeManager nmN (SIGTERM) and returns when its
# process is gone; `nodemanager start N` starts it again (same
# configuration and ports; also after it was SIGKILLed) and returns when
# the ResourceManager lists both NodeManagers RUNNING again.
#
# What is where in DIR:
#   conf/                 the clients' configuration (core-site.xml: fs.defaultFS)
#   ports                 "name port" lines: rm, web, nm1, nm2, ... namenode,
#                         namenode-web, dn1, dn2 (data transfer), dn1-web, dn2-web
#   pids/NAME.pid         rm, nm1, nm2, nn, dn1, dn2
#   logs/NAME.log         each daemon's log (a restarted DataNode appends); a
#                         DataNode's has a clienttrace line for each block it
#                         serves: "op: HDFS_READ, ... blockid: BP-...:blk_<id>_<genstamp>"
#   hdfs/name/            the NameNode's metadata
#   dnN/conf/             DataNode N's configuration
#   dnN/data/             DataNode N's dfs.datanode.data.dir; a finalized
#                         block's replica is the file
#                         dnN/data/current/BP-*/current/finalized/subdir*/subdir*/blk_<id>
#                         (the block's bytes as they are, no header) beside
#                         blk_<id>_<genstamp>.meta (its CRC32C checksums,
#                         one per 512 bytes). No block scanner runs: a
#                         replica changed on disk stays as it is until a
#                         client reads it and reports it
#
# `start --hdfs --hosts FILE` puts the daemons on three hosts: FILE has a
# line "ROLE ADDRESS [COMMAND...]" for each ROLE of head (the
# ResourceManager and the NameNode), node1 (nm1 and dn1) and node2 (nm2
# and dn2): the role's daemons bind ADDRESS (for every port they listen
# on, and as their host name) and are started as `COMMAND java ...`
# (COMMAND's words split on blanks; it must exec java, keeping its pid:
# `ip netns exec NS`, a wrapper that enters a host's namespaces). This
# script's own waits and the clients reach them at those addresses (the
# caller's host must route to them). A NodeManager's node id is the
# canonical name of ADDRESS (a host whose resolver has no name for it:
# ADDRESS itself) and its port. A daemon's java.io.tmpdir and hadoop.log.dir are its host's /tmp, as is
# hadoop.tmp.dir; what a host needs of DIR: head DIR/conf, DIR/labels, DIR/hdfs and DIR/rmstate
# (the ResourceManager's recovery state: with --hosts the RM recovers its applications
# across a restart, work-preserving, and each NodeManager its containers), nodeN DIR/nmN and
# DIR/dnN (a DataNode's empty webapps are in DIR/dnN/www). FILE is copied
# to DIR/hosts, which `status`, `stop`, `datanode` and `nodemanager` read
# (tests/system/clusters.py's HadoopHosts: network and mount namespaces).
#
# Environment: LOOM_YARN_START_TIMEOUT (seconds, default 180) bounds each
# Kerberos: `--kerberos KDIR` (with --hdfs-only, after --protection) makes
# the HDFS secure: hadoop.security.authentication=kerberos, the NameNode
# as nn/localhost@REALM, the DataNodes as dn/localhost@REALM, the web
# servers' SPNEGO as HTTP/localhost@REALM, each from its keytab in
# KDIR/keytabs/ (nn.keytab, dn.keytab, HTTP.keytab), the realm in
# KDIR/realm, every JVM with -Djava.security.krb5.conf=KDIR/krb5.conf
# (tests/system/kdc.py writes such a KDIR). Block access tokens on;
# ignore.secure.ports.for.testing instead of root and privileged ports;
# no dfs.data.transfer.protection (DataNodes take plain data transfer
# with the NameNode's block tokens) unless `--data-protection P` (before
# --kerberos; P a level or a comma-separated list of them, the qops the
# DataNodes offer) sets it (DataNodes then take only the SASL handshake of
# DataTransferProtocol, with the block token). `--encrypt-data ALGO`
# (after --data-protection) sets dfs.encrypt.data.transfer and its
# algorithm: every DataNode connection then takes only the encrypted
# handshake, with the NameNode's data encryption key, at privacy; and
# dfs.encrypt.data.transfer.cipher.suites=AES/CTR/NoPadding, so that a
# client that asks for AES (the cluster's configuration does) gets it. KDIR is recorded in
# DIR/kerberos for `datanode start`.
#
# wait of `start` and `datanode start`; LOOM_YARN_CLASSPATH (a file) skips
# Maven; LOOM_YARN_RECOVERY=1 gives the one-host cluster the recovery that
# --hosts has.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
POM="$ROOT/hadoop/pom.xml"
PY=${PYTHON:-python3}
TIMEOUT=${LOOM_YARN_START_TIMEOUT:-180}

# The two NodeManagers: memory (MB), vcores, yarn.io/gpu, node label.
NM_MB=(3072 4096)
NM_VCORES=(2 4)
NM_GPUS=(2 0)
NM_LABEL=(gpu "")

# JDK 17 closes what Hadoop's RPC and web layers reflect into.
JAVA_OPENS=(--add-opens=java.base/java.lang=ALL-UNNAMED
            --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
            --add-opens=java.base/java.io=ALL-UNNAMED
            --add-opens=java.base/java.net=ALL-UNNAMED
            --add-opens=java.base/java.nio=ALL-UNNAMED
            --add-opens=java.base/java.util=ALL-UNNAMED
            --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
            --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
            --add-opens=java.base/sun.security.x509=ALL-UNNAMED
            --add-exports=java.base/sun.net.dns=ALL-UNNAMED
            --add-exports=java.base/sun.net.util=ALL-UNNAMED)
# Small heaps, quick start on a busy machine (C1 only, serial GC).
JAVA_FAST=(-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss512k -Djava.net.preferIPv4Stack=true)

# Where the daemons run: 127.0.0.1, unless --hosts (load_hosts) says.
HEAD=127.0.0.1
NODE=(127.0.0.1 127.0.0.1)
HOSTS=0
declare -A HOST_RUN=()

say() { echo "yarn-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  echo "usage: scripts/yarn-cluster.sh start [--hdfs [--hosts FILE] | --hdfs-only] [--protection authentication|integrity|privacy] [--data-protection LEVEL[,LEVEL...]] [--encrypt-data 3des|rc4] [--kerberos KDIR] [DIR] | stop [DIR] | status [DIR]" \
    "| datanode stop|start N [DIR] | nodemanager stop|start N [DIR] | rm stop|kill|start [DIR] | classpath" >&2
  exit 2
}

# Reads a hosts file (see --hosts) into HEAD, NODE and HOST_RUN.
load_hosts() {
  local role addr rest
  HOSTS=1
  while read -r role addr rest; do
    case $role in
    "" | "#"*) continue ;;
    head) HEAD=$addr ;;
    node1) NODE[0]=$addr ;;
    node2) NODE[1]=$addr ;;
    *) die "$1: unknown role $role (head, node1, node2)" ;;
    esac
    [[ "$addr" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$1: $role: not an IPv4 address: $addr"
    HOST_RUN[$role]=$rest
  done <"$1"
  [ -n "${HOST_RUN[head]+x}" ] && [ -n "${HOST_RUN[node1]+x}" ] && [ -n "${HOST_RUN[node2]+x}" ] ||
    die "$1: needs a line for each of head, node1, node2"
}

# The host a daemon runs on.
host_of() {
  case $1 in
  rm | nn) echo head ;;
  nm1 | dn1) echo node1 ;;
  nm2 | dn2) echo node2 ;;
  esac
}

default_dir() {
  if [ -n "${LOOM_HOME:-}" ]; then echo "$LOOM_HOME/yarn"; else echo "/tmp/loom-yarn-${USER:-$(id -un)}"; fi
}

# The Hadoop classpath: resolved by Maven once per pom, cached.
classpath() {
  if [ -n "${LOOM_YARN_CLASSPATH:-}" ]; then cat "$LOOM_YARN_CLASSPATH"; return; fi
  command -v java >/dev/null || die "java is not installed (a JDK 17: default-jdk-headless)"
  local sum cache
  sum=$(sha256sum "$POM" | cut -c1-16)
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/loom/hadoop-classpath-$sum.txt"
  if [ -s "$cache" ]; then
    local ok=1 jar
    local IFS=:
    for jar in $(cat "$cache"); do [ -e "$jar" ] || { ok=0; break; }; done
    if [ $ok = 1 ]; then cat "$cache"; return; fi
  fi
  command -v mvn >/dev/null || die "mvn is not installed (Maven resolves Hadoop from Maven Central)"
  mkdir -p "$(dirname "$cache")"
  say "resolving Hadoop's jars with Maven ($POM; about 120 MB into ~/.m2 the first time)"
  mvn -q -B -f "$POM" dependency:build-classpath -Dmdep.outputFile="$cache.tmp" >&2 ||
    die "mvn could not resolve $POM (is Maven Central reachable?)"
  mv "$cache.tmp" "$cache"
  cat "$cache"
}

# n free TCP ports on 127.0.0.1, one a line.
free_ports() {
  "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Writes a Hadoop configuration file: name=value lines on stdin.
write_xml() {
  {
    echo '<?xml version="1.0"?>'
    echo '<!-- written by scripts/yarn-cluster.sh -->'
    echo '<configuration>'
    local line
    while IFS= read -r line; do
      [ -z "$line" ] && continue
      printf '  <property><name>%s</name><value>%s</value></property>\n' "${line%%=*}" "${line#*=}"
    done
    echo '</configuration>'
  } >"$1"
}

write_conf() {
  local d=$1
  mkdir -p "$d/conf" "$d/logs" "$d/pids" "$d/tmp" "$d/labels"
  rm -f "$d"/logs/*.log
  mapfile -t P < <(free_ports 19)
  RM_PORT=${P[0]}
  RM_SCHED=${P[1]}
  RM_TRACKER=${P[2]}
  RM_ADMIN=${P[3]}
  RM_WEB=${P[4]}
  : >"$d/ports"
  if [ "$YARN" = 1 ]; then
    printf 'rm %s\nscheduler %s\ntracker %s\nadmin %s\nweb %s\n' "$RM_PORT" "$RM_SCHED" \
      "$RM_TRACKER" "$RM_ADMIN" "$RM_WEB" >"$d/ports"
  fi
  local fs=file:/// HADOOP_TMP=$d/tmp
  # on hosts of their own, each its own /tmp
  [ "$HOSTS" = 1 ] && HADOOP_TMP=/tmp/hadoop
  [ "$HDFS" = 1 ] && fs=hdfs://$HEAD:${P[11]}
  write_xml "$d/conf/core-site.xml" <<EOF
fs.defaultFS=$fs
hadoop.security.authentication=$([ -n "$KRB" ] && echo kerberos || echo simple)
hadoop.rpc.protection=$PROTECTION
hadoop.tmp.dir=$HADOOP_TMP
ipc.client.connect.max.retries=3
ipc.client.connect.retry.interval=500
ipc.client.connect.max.retries.on.timeouts=3
EOF
  cat >"$d/conf/log4j.properties" <<'EOF'
# every daemon logs to its stderr, which yarn-cluster.sh sends to DIR/logs/
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
# a DataNode logs every block it serves (op: HDFS_READ, blockid: ...:blk_<id>_<genstamp>)
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace=DEBUG
EOF
  rm -f "$d/conf/hdfs-site.xml" "$d/conf/yarn-site.xml" "$d/conf/capacity-scheduler.xml"
  [ "$HDFS" = 1 ] && write_hdfs_conf "$d"
  [ "$YARN" = 1 ] && write_yarn_conf "$d"
  return 0
}

# With --hosts, log aggregation is on: when an application ends, each
# NodeManager uploads its containers' logs to /app-logs on HDFS (kept an
# hour), where `yarn logs -applicationId ID` (LogsCLI) reads them.
write_yarn_conf() {
  local d=$1 rec=0
  # work-preserving recovery of the RM and the NMs: with --hosts, or
  # LOOM_YARN_RECOVERY=1 (the one-host cluster runs without by default)
  if [ "$HOSTS" = 1 ] || [ "${LOOM_YARN_RECOVERY:-0}" = 1 ]; then rec=1; fi
  # what the RM, the NMs and every client read
  write_xml "$d/conf/yarn-site.xml" <<EOF
yarn.resourcemanager.hostname=$HEAD
yarn.resourcemanager.address=$HEAD:$RM_PORT
yarn.resourcemanager.scheduler.address=$HEAD:$RM_SCHED
yarn.resourcemanager.resource-tracker.address=$HEAD:$RM_TRACKER
yarn.resourcemanager.admin.address=$HEAD:$RM_ADMIN
yarn.resourcemanager.webapp.address=$HEAD:$RM_WEB
yarn.http.policy=HTTP_ONLY
yarn.resourcemanager.scheduler.class=org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler
yarn.scheduler.minimum-allocation-mb=64
yarn.scheduler.minimum-allocation-vcores=1
yarn.scheduler.include-port-in-node-name=true
yarn.resource-types=yarn.io/gpu
yarn.node-labels.enabled=true
yarn.node-labels.configuration-type=distributed
yarn.node-labels.fs-store.root-dir=file://$d/labels
yarn.resourcemanager.connect.max-wait.ms=20000
yarn.resourcemanager.connect.retry-interval.ms=500
yarn.client.nodemanager-connect.max-wait-ms=20000
yarn.client.nodemanager-connect.retry-interval-ms=500
yarn.nm.liveness-monitor.expiry-interval-ms=10000
yarn.am.liveness-monitor.expiry-interval-ms=10000
yarn.resourcemanager.am-rm-tokens.master-key-rolling-interval-secs=31
yarn.resourcemanager.nodemanagers.heartbeat-interval-ms=500
yarn.resourcemanager.recovery.enabled=$([ "$rec" = 1 ] && echo true || echo false)
$([ "$rec" = 1 ] && printf '%s\n' \
    yarn.resourcemanager.store.class=org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore \
    "yarn.resourcemanager.fs.state-store.uri=file://$d/rmstate" \
    yarn.resourcemanager.work-preserving-recovery.enabled=true \
    yarn.resourcemanager.work-preserving-recovery.scheduling-wait-ms=2000)
yarn.timeline-service.enabled=false
yarn.resourcemanager.system-metrics-publisher.enabled=false
yarn.nodemanager.vmem-check-enabled=false
yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage=100
yarn.nodemanager.node-labels.resync-interval-ms=5000
yarn.nodemanager.delete.debug-delay-sec=600
yarn.log-aggregation-enable=$([ "$HOSTS" = 1 ] && echo true || echo false)
$([ "$HOSTS" = 1 ] && printf '%s\n' yarn.nodemanager.remote-app-log-dir=/app-logs \
    yarn.log-aggregation.retain-seconds=3600 yarn.log-aggregation.retain-check-interval-seconds=300)
EOF
  write_xml "$d/conf/capacity-scheduler.xml" <<EOF
yarn.scheduler.capacity.resource-calculator=org.apache.hadoop.yarn.util.resource.DominantResourceCalculator
yarn.scheduler.capacity.maximum-am-resource-percent=0.5
yarn.scheduler.capacity.root.queues=default
yarn.scheduler.capacity.root.default.capacity=100
yarn.scheduler.capacity.root.default.maximum-capacity=100
yarn.scheduler.capacity.root.accessible-node-labels.gpu.capacity=100
yarn.scheduler.capacity.root.default.accessible-node-labels=gpu
yarn.scheduler.capacity.root.default.accessible-node-labels.gpu.capacity=100
EOF
  local i
  for i in 1 2; do
    local nd="$d/nm$i" k=$((i - 1))
    mkdir -p "$nd/conf" "$nd/local" "$nd/logs"
    cp "$d/conf/core-site.xml" "$d/conf/capacity-scheduler.xml" "$d/conf/log4j.properties" \
      "$nd/conf/"
    [ "$HDFS" = 1 ] && cp "$d/conf/hdfs-site.xml" "$nd/conf/"
    local base=$((5 + 3 * k))
    {
      # the common part, less its closing tag, then this NM's own
      sed '$d' "$d/conf/yarn-site.xml"
      write_xml /dev/stdout <<EOF | sed -n '/<property>/p'
yarn.nodemanager.address=${NODE[$k]}:${P[$base]}
yarn.nodemanager.localizer.address=${NODE[$k]}:${P[$((base + 1))]}
yarn.nodemanager.webapp.address=${NODE[$k]}:${P[$((base + 2))]}
yarn.nodemanager.hostname=${NODE[$k]}
yarn.nodemanager.local-dirs=$nd/local
yarn.nodemanager.log-dirs=$nd/logs
yarn.nodemanager.resource.memory-mb=${NM_MB[$k]}
yarn.nodemanager.resource.cpu-vcores=${NM_VCORES[$k]}
yarn.nodemanager.resource-type.yarn.io/gpu=${NM_GPUS[$k]}
yarn.nodemanager.node-labels.provider=config
yarn.nodemanager.node-labels.provider.configured-node-partition=${NM_LABEL[$k]}
$([ "$rec" = 1 ] && printf '%s\n' yarn.nodemanager.recovery.enabled=true \
        "yarn.nodemanager.recovery.dir=$nd/recovery" yarn.nodemanager.recovery.supervised=true)
EOF
      echo '</configuration>'
    } >"$nd/conf/yarn-site.xml"
    echo "nm$i ${P[$base]}" >>"$d/ports"
  done
}

# HDFS: the NameNode's (and every client's) hdfs-site.xml in DIR/conf, and
# each DataNode's own, with its ports and data directory.
write_hdfs_conf() {
  local d=$1
  rm -rf "$d/hdfs/name" "$d/dn1/data" "$d/dn2/data"
  mkdir -p "$d/hdfs/name"
  printf 'namenode %s\nnamenode-web %s\n' "${P[11]}" "${P[12]}" >>"$d/ports"
  write_xml "$d/conf/hdfs-site.xml" <<EOF
dfs.replication=2
dfs.namenode.rpc-address=$HEAD:${P[11]}
dfs.namenode.http-address=$HEAD:${P[12]}
dfs.namenode.name.dir=file://$d/hdfs/name
dfs.namenode.safemode.extension=0
dfs.namenode.datanode.registration.ip-hostname-check=false
dfs.heartbeat.interval=1
dfs.namenode.heartbeat.recheck-interval=10000
dfs.http.policy=HTTP_ONLY
dfs.webhdfs.enabled=true
dfs.permissions.enabled=true
dfs.block.scanner.volume.bytes.per.second=0
$([ -n "$KRB" ] && kerberos_keys)
EOF
  local i
  for i in 1 2; do
    local dd="$d/dn$i" base=$((13 + 3 * (i - 1)))
    mkdir -p "$dd/conf" "$dd/data"
    cp "$d/conf/core-site.xml" "$d/conf/log4j.properties" "$dd/conf/"
    {
      sed '$d' "$d/conf/hdfs-site.xml"
      write_xml /dev/stdout <<EOF | sed -n '/<property>/p'
dfs.datanode.data.dir=file://$dd/data
dfs.datanode.address=${NODE[$((i - 1))]}:${P[$base]}
dfs.datanode.http.address=${NODE[$((i - 1))]}:${P[$((base + 1))]}
dfs.datanode.ipc.address=${NODE[$((i - 1))]}:${P[$((base + 2))]}
dfs.datanode.hostname=${NODE[$((i - 1))]}
EOF
      echo '</configuration>'
    } >"$dd/conf/hdfs-site.xml"
    printf 'dn%s %s\ndn%s-web %s\n' "$i" "${P[$base]}" "$i" "${P[$((base + 1))]}" >>"$d/ports"
  done
}

# The secure HDFS's keys (--kerberos), one name=value a line.
kerberos_keys() {
  local r
  r=$(cat "$KRB/realm")
  printf '%s\n' "dfs.namenode.kerberos.principal=nn/localhost@$r" \
    "dfs.namenode.keytab.file=$KRB/keytabs/nn.keytab" \
    "dfs.datanode.kerberos.principal=dn/localhost@$r" \
    "dfs.datanode.keytab.file=$KRB/keytabs/dn.keytab" \
    "dfs.web.authentication.kerberos.principal=HTTP/localhost@$r" \
    "dfs.web.authentication.kerberos.keytab=$KRB/keytabs/HTTP.keytab" \
    "dfs.block.access.token.enable=true" \
    "ignore.secure.ports.for.testing=true"
  if [ -n "$DATA_PROTECTION" ]; then echo "dfs.data.transfer.protection=$DATA_PROTECTION"; fi
  if [ -n "$ENCRYPT_DATA" ]; then
    printf '%s\n' "dfs.encrypt.data.transfer=true" "dfs.encrypt.data.transfer.algorithm=$ENCRYPT_DATA" \
      "dfs.encrypt.data.transfer.cipher.suites=AES/CTR/NoPadding"
  fi
}

port_of() { awk -v k="$2" '$1 == k {print $2}' "$1/ports"; }

# Whether pid file $1 names a live process of this cluster (its command
# line carries -Dloom.yarn.dir=DIR: a recycled pid is never ours).
alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && grep -qzxF -- "-Dloom.yarn.dir=$DIR" "/proc/$pid/cmdline" 2>/dev/null
}

# Starts a daemon: name, heap, configuration directory, main class, and
# what else goes first on its classpath. Its log is appended to (a
# DataNode started again keeps what it logged before).
launch() {
  local name=$1 heap=$2 conf=$3 cls=$4 extra=${5:-}
  local wrap=() tmp="$DIR/tmp" logd="$DIR/logs"
  if [ "$HOSTS" = 1 ]; then
    read -ra wrap <<<"${HOST_RUN[$(host_of "$name")]}"
    tmp=/tmp logd=/tmp
  fi
  (
    export HADOOP_CONF_DIR="$conf" HADOOP_LOG_DIR="$DIR/logs"
    cd "$DIR"
    # the web servers' work directories (jetty-*) go in DIR, not /tmp:
    # nothing of the cluster outlives DIR
    mkdir -p "$DIR/tmp"
    exec setsid "${wrap[@]}" java "-Xmx$heap" "${JAVA_FAST[@]}" "${JAVA_OPENS[@]}" "-Dloom.yarn.dir=$DIR" \
      "-Djava.io.tmpdir=$tmp" \
      "-Dhadoop.log.dir=$logd" "-Dyarn.log.dir=$logd" -cp "$conf:$extra$CP" "$cls" \
      </dev/null >>"$DIR/logs/$name.log" 2>&1
  ) &
  local pid=$! i
  echo "$pid" >"$DIR/pids/$name.pid"
  # Until the subshell has exec'd java, its command line lacks the mark
  # alive() looks for: a busy machine can take a while to get there.
  for ((i = 0; i < 200; i++)); do
    grep -qzxF -- "-Dloom.yarn.dir=$DIR" "/proc/$pid/cmdline" 2>/dev/null && break
    [ -e "/proc/$pid" ] || break
    sleep 0.05
  done
}

tail_log() { say "last lines of $DIR/logs/$1.log:"; tail -n "${2:-15}" "$DIR/logs/$1.log" >&2 || true; }

# Waits until command $2 succeeds, at most TIMEOUT seconds, while the
# daemons named in $3 live; $1 says what is waited for. On failure it runs
# $ON_FAIL (by default: stop the whole cluster) and exits.
ON_FAIL=stop_all
wait_for() {
  local what=$1 check=$2 daemons=$3 start=$SECONDS d
  while ! eval "$check"; do
    for d in $daemons; do
      if ! alive "$DIR/pids/$d.pid"; then
        tail_log "$d" 25
        $ON_FAIL
        die "$d exited while waiting for $what (its log: $DIR/logs/$d.log)"
      fi
    done
    if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
      for d in $daemons; do tail_log "$d"; done
      $ON_FAIL
      die "timed out after ${TIMEOUT}s waiting for $what (LOOM_YARN_START_TIMEOUT)"
    fi
    sleep 0.5
  done
}

rest() { curl -sf --max-time 5 "http://$HEAD:$(port_of "$DIR" web)/ws/v1/cluster/$1"; }

rm_started() { rest info 2>/dev/null | grep -q '"state":"STARTED"'; }

# The RM's nodes: "RUNNING nodes, of which with label gpu and yarn.io/gpu 2".
nodes_ready() {
  rest nodes 2>/dev/null | "$PY" -c '
import json, sys
nodes = (json.load(sys.stdin).get("nodes") or {}).get("node") or []
run = [n for n in nodes if n.get("state") == "RUNNING"]
def gpus(n):
    for r in (n.get("totalResource") or {}).get("resourceInformations", {}).get("resourceInformation", []):
        if r.get("name") == "yarn.io/gpu":
            return r.get("value")
    return 0
gpu = [n for n in run if "gpu" in (n.get("nodeLabels") or []) and gpus(n) == 2]
sys.exit(0 if len(run) == 2 and len(gpu) == 1 else 1)'
}

# Stops the processes in pid files $@: SIGTERM, then SIGKILL for what
# still lives after STOP_GRACE seconds; returns when all are gone.
STOP_GRACE=15
stop_some() {
  local f name start=$SECONDS left killed=0
  for f in "$@"; do
    [ -e "$f" ] && alive "$f" && { kill -TERM "$(cat "$f")" 2>/dev/null || true; STOPPED+=("$(cat "$f")"); }
  done
  while :; do
    left=()
    for f in "$@"; do [ -e "$f" ] && alive "$f" && left+=("$f"); done
    [ ${#left[@]} -eq 0 ] && break
    if [ $killed = 0 ] && [ $((SECONDS - start)) -ge $STOP_GRACE ]; then
      for f in "${left[@]}"; do
        name=$(basename "$f" .pid)
        say "$name did not stop within ${STOP_GRACE}s of SIGTERM: SIGKILL"
        kill -KILL "$(cat "$f")" 2>/dev/null || true
      done
      killed=1
    fi
    sleep 0.2
  done
  rm -f "$@"
}

# NodeManagers first: they unregister from a live ResourceManager at once,
# but retry for yarn.resourcemanager.connect.max-wait.ms without one.
# The NameNode: both DataNodes live, and out of safe mode.
hdfs_ready() {
  local web
  web=$(port_of "$DIR" namenode-web)
  curl -sf --max-time 5 "http://$HEAD:$web/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo" 2>/dev/null |
    "$PY" -c '
import json, sys
b = json.load(sys.stdin)["beans"][0]
live = json.loads(b.get("LiveNodes") or "{}")
sys.exit(0 if len(live) == 2 and not b.get("Safemode") else 1)' 2>/dev/null
}

# DataNode $1 says (its own JMX) that it is registered with the NameNode
# (its BPServiceActor RUNNING: it registers before it runs).
dn_registered() {
  local web
  web=$(port_of "$DIR" "dn$1-web")
  curl -sf --max-time 5 "http://${NODE[$(($1 - 1))]}:$web/jmx?qry=Hadoop:service=DataNode,name=DataNodeInfo" \
    2>/dev/null | "$PY" -c '
import json, sys
b = json.load(sys.stdin)["beans"][0]
actors = json.loads(b.get("BPServiceActorInfo") or "[]")
sys.exit(0 if actors and all(a.get("ActorState") == "RUNNING" for a in actors) else 1)' 2>/dev/null
}

stop_all() {
  STOPPED=()
  local nms=()
  local f
  for f in "$DIR"/pids/nm*.pid "$DIR"/pids/dn*.pid; do [ -e "$f" ] && nms+=("$f"); done
  [ ${#nms[@]} -gt 0 ] && stop_some "${nms[@]}"
  for f in "$DIR"/pids/*.pid; do [ -e "$f" ] && stop_some "$f"; done
  if [ ${#STOPPED[@]} -gt 0 ]; then say "stopped ${#STOPPED[@]} processes (${STOPPED[*]})"; fi
}

cmd_start() {
  local f
  for f in "$DIR"/pids/*.pid; do
    [ -e "$f" ] && alive "$f" && die "a cluster already runs in $DIR (scripts/yarn-cluster.sh stop $DIR)"
  done
  rm -f "$DIR"/pids/*.pid
  if [ -n "$HOSTS_FILE" ]; then
    [ "$HOSTS_FILE" = "$DIR/hosts" ] || cp "$HOSTS_FILE" "$DIR/hosts"
    load_hosts "$DIR/hosts"
  else
    rm -f "$DIR/hosts"
  fi
  CP=$(classpath)
  local t0=$SECONDS
  write_conf "$DIR"
  # interrupted half-way: nothing stays
  trap 'stop_all; exit 130' INT TERM
  if [ "$YARN" = 1 ]; then
    launch rm 384m "$DIR/conf" org.apache.hadoop.yarn.server.resourcemanager.ResourceManager
    say "ResourceManager starting on $HEAD:$RM_PORT (web http://$HEAD:$RM_WEB), log $DIR/logs/rm.log"
    # nm2 has no label: it may register at once
    launch nm2 256m "$DIR/nm2/conf" org.apache.hadoop.yarn.server.nodemanager.NodeManager
  fi
  local hdfs_daemons=""
  if [ "$HDFS" = 1 ]; then
    # formatting (a JVM of its own) overlaps with the RM's start
    HADOOP_CONF_DIR="$DIR/conf" timeout "$TIMEOUT" java -Xmx256m "${JAVA_FAST[@]}" "${JAVA_OPENS[@]}" \
      -cp "$DIR/conf:$CP" org.apache.hadoop.hdfs.server.namenode.NameNode -format -force \
      -nonInteractive >"$DIR/logs/nn-format.log" 2>&1 || {
      tail_log nn-format
      stop_all
      die "could not format the NameNode (its log: $DIR/logs/nn-format.log)"
    }
    # The HDFS daemons' web servers want webapps/<name> on the classpath,
    # which Hadoop's tarball has and its jars do not: empty ones serve
    # their servlets (JMX, WebHDFS), without the static pages.
    mkdir -p "$DIR/hdfs/www/webapps/hdfs" "$DIR/hdfs/www/webapps/datanode"
    launch nn 384m "$DIR/conf" org.apache.hadoop.hdfs.server.namenode.NameNode "$DIR/hdfs/www:"
    launch_dn 1
    launch_dn 2
    hdfs_daemons="nn dn1 dn2"
    say "NameNode starting on hdfs://$HEAD:$(port_of "$DIR" namenode), log $DIR/logs/nn.log"
  fi
  if [ "$YARN" = 1 ]; then
    wait_for "the ResourceManager's REST API to say STARTED (http://$HEAD:$RM_WEB/ws/v1/cluster/info)" \
      rm_started "rm nm2 $hdfs_daemons"
    # A label must be in the cluster before an NM reports it.
    HADOOP_CONF_DIR="$DIR/conf" timeout "$TIMEOUT" java -Xmx128m "${JAVA_FAST[@]}" \
      -cp "$DIR/conf:$CP" org.apache.hadoop.yarn.client.cli.RMAdminCLI \
      -addToClusterNodeLabels "gpu(exclusive=false)" >"$DIR/logs/rmadmin.log" 2>&1 || {
      tail_log rmadmin
      stop_all
      die "could not add the node label gpu to the cluster (RMAdminCLI -addToClusterNodeLabels)"
    }
    launch nm1 256m "$DIR/nm1/conf" org.apache.hadoop.yarn.server.nodemanager.NodeManager
    wait_for "2 RUNNING NodeManagers, one labelled gpu with yarn.io/gpu 2 (http://$HEAD:$RM_WEB/ws/v1/cluster/nodes)" \
      nodes_ready "rm nm1 nm2 $hdfs_daemons"
  fi
  if [ "$HDFS" = 1 ]; then
    wait_for "the NameNode to have 2 live DataNodes and leave safe mode (http://$HEAD:$(port_of "$DIR" namenode-web)/jmx)" \
      hdfs_ready "nn dn1 dn2"
  fi
  trap - INT TERM
  local hdfs=""
  [ "$HDFS" = 1 ] && hdfs="HDFS hdfs://$HEAD:$(port_of "$DIR" namenode) (2 DataNodes)"
  if [ "$YARN" = 1 ]; then
    say "ready in $((SECONDS - t0))s: ResourceManager $HEAD:$RM_PORT, NodeManagers nm1 (gpu) and nm2${hdfs:+, $hdfs}; stop with: scripts/yarn-cluster.sh stop $DIR"
  else
    say "ready in $((SECONDS - t0))s: $hdfs; stop with: scripts/yarn-cluster.sh stop $DIR"
  fi
  echo "export HADOOP_CONF_DIR=$DIR/conf"
}

launch_dn() {
  local www="$DIR/hdfs/www"
  # on a host of its own, it sees its own directory only
  [ "$HOSTS" = 1 ] && www="$DIR/dn$1/www" && mkdir -p "$www/webapps/datanode"
  launch "dn$1" 256m "$DIR/dn$1/conf" org.apache.hadoop.hdfs.server.datanode.DataNode "$www:"
}

# datanode stop|start N
cmd_datanode() {
  local op=$1 n=$2 pidf="$DIR/pids/dn$2.pid" pid start
  [ -n "$(port_of "$DIR" namenode 2>/dev/null)" ] && [ -d "$DIR/dn$n/conf" ] ||
    die "no HDFS in $DIR (scripts/yarn-cluster.sh start --hdfs-only $DIR)"
  case $op in
  stop)
    alive "$pidf" || die "DataNode dn$n is not running in $DIR"
    pid=$(cat "$pidf")
    kill -TERM "$pid"
    start=$SECONDS
    while alive "$pidf"; do
      if [ $((SECONDS - start)) -ge "$STOP_GRACE" ]; then
        tail_log "dn$n"
        kill -KILL "$pid" 2>/dev/null || true
        die "DataNode dn$n (pid $pid) did not stop within ${STOP_GRACE}s of SIGTERM: SIGKILLed it"
      fi
      sleep 0.1
    done
    say "DataNode dn$n stopped (pid $pid; ${NODE[$((n - 1))]}:$(port_of "$DIR" "dn$n"))"
    ;;
  start)
    alive "$pidf" && die "DataNode dn$n already runs (pid $(cat "$pidf"))"
    alive "$DIR/pids/nn.pid" || die "the NameNode does not run in $DIR"
    CP=$(classpath)
    # a DataNode that does not come up is stopped again; the rest stays
    ON_FAIL="stop_some $pidf"
    trap 'stop_some "$pidf"; exit 130' INT TERM
    launch_dn "$n"
    wait_for "DataNode dn$n to register with the NameNode and the NameNode to have 2 live DataNodes (http://${NODE[$((n - 1))]}:$(port_of "$DIR" "dn$n-web")/jmx, http://$HEAD:$(port_of "$DIR" namenode-web)/jmx)" \
      "dn_registered $n && hdfs_ready" "nn dn$n"
    trap - INT TERM
    say "DataNode dn$n running again (pid $(cat "$pidf"); ${NODE[$((n - 1))]}:$(port_of "$DIR" "dn$n"))"
    ;;
  *) usage ;;
  esac
}

# nodemanager stop|start N
cmd_nodemanager() {
  local op=$1 n=$2 pidf="$DIR/pids/nm$2.pid" pid start
  [ -n "$(port_of "$DIR" rm 2>/dev/null)" ] && [ -d "$DIR/nm$n/conf" ] ||
    die "no YARN in $DIR (scripts/yarn-cluster.sh start $DIR)"
  case $op in
  stop)
    alive "$pidf" || die "NodeManager nm$n is not running in $DIR"
    stop_some "$pidf"
    say "NodeManager nm$n stopped"
    ;;
  start)
    alive "$pidf" && die "NodeManager nm$n already runs (pid $(cat "$pidf"))"
    alive "$DIR/pids/rm.pid" || die "the ResourceManager does not run in $DIR"
    CP=$(classpath)
    # a NodeManager that does not come up is stopped again; the rest stays
    ON_FAIL="stop_some $pidf"
    trap 'stop_some "$pidf"; exit 130' INT TERM
    launch "nm$n" 256m "$DIR/nm$n/conf" org.apache.hadoop.yarn.server.nodemanager.NodeManager
    wait_for "2 RUNNING NodeManagers again, one labelled gpu (http://$HEAD:$(port_of "$DIR" web)/ws/v1/cluster/nodes)" \
      nodes_ready "rm nm$n"
    trap - INT TERM
    say "NodeManager nm$n running again (pid $(cat "$pidf"); ${NODE[$((n - 1))]}:$(port_of "$DIR" "nm$n"))"
    ;;
  *) usage ;;
  esac
}

# rm stop|kill|start: SIGTERM, or SIGKILL (a crash); start returns when the
# RM says STARTED and lists both NodeManagers RUNNING again
cmd_rm() {
  local pidf="$DIR/pids/rm.pid" pid
  [ -n "$(port_of "$DIR" rm 2>/dev/null)" ] || die "no YARN in $DIR (scripts/yarn-cluster.sh start $DIR)"
  case $1 in
  stop)
    alive "$pidf" || die "the ResourceManager is not running in $DIR"
    stop_some "$pidf"
    say "ResourceManager stopped"
    ;;
  kill)
    alive "$pidf" || die "the ResourceManager is not running in $DIR"
    pid=$(cat "$pidf")
    kill -KILL "$pid"
    while alive "$pidf"; do sleep 0.05; done
    say "ResourceManager killed (SIGKILL, pid $pid)"
    ;;
  start)
    alive "$pidf" && die "the ResourceManager already runs (pid $(cat "$pidf"))"
    CP=$(classpath)
    ON_FAIL="stop_some $pidf"
    trap 'stop_some "$pidf"; exit 130' INT TERM
    launch rm 384m "$DIR/conf" org.apache.hadoop.yarn.server.resourcemanager.ResourceManager
    wait_for "the ResourceManager's REST API to say STARTED (http://$HEAD:$(port_of "$DIR" web)/ws/v1/cluster/info)" \
      rm_started rm
    wait_for "2 RUNNING NodeManagers again, one labelled gpu (http://$HEAD:$(port_of "$DIR" web)/ws/v1/cluster/nodes)" \
      nodes_ready rm
    trap - INT TERM
    say "ResourceManager running again (pid $(cat "$pidf"); $HEAD:$(port_of "$DIR" rm))"
    ;;
  *) usage ;;
  esac
}

cmd_status() {
  [ -f "$DIR/ports" ] || die "no cluster in $DIR"
  local f n=0 name json
  for f in "$DIR"/pids/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    if alive "$f"; then echo "$name running (pid $(cat "$f"))"; n=$((n + 1)); else echo "$name not running"; fi
  done
  if [ -n "$(port_of "$DIR" rm)" ]; then
    echo "ResourceManager $HEAD:$(port_of "$DIR" rm), web http://$HEAD:$(port_of "$DIR" web)"
  fi
  if [ -n "$(port_of "$DIR" namenode)" ]; then
    echo "NameNode hdfs://$HEAD:$(port_of "$DIR" namenode), web http://$HEAD:$(port_of "$DIR" namenode-web)"
    if json=$(curl -sf --max-time 5 "http://$HEAD:$(port_of "$DIR" namenode-web)/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo" 2>/dev/null); then
      "$PY" -c '
import json, sys
b = json.loads(sys.argv[1])["beans"][0]
live = json.loads(b.get("LiveNodes") or "{}")
print("HDFS %d live DataNodes (%s)%s" % (len(live), " ".join(sorted(v.get("xferaddr", k) for k, v in live.items())),
      ", in safe mode" if b.get("Safemode") else ""))' "$json"
    else
      echo "the NameNode does not answer"
    fi
  fi
  if [ -n "$(port_of "$DIR" rm)" ]; then
    if json=$(rest nodes 2>/dev/null); then
      "$PY" -c '
import json, sys
for n in (json.loads(sys.argv[1]).get("nodes") or {}).get("node") or []:
    t = n["totalResource"]
    print("node %s %s %d MB %d vcores labels [%s]" % (n["id"], n["state"], t["memory"],
          t["vCores"], ",".join(n.get("nodeLabels") or [])))' "$json"
    else
      echo "the ResourceManager does not answer"
    fi
  fi
  echo "export HADOOP_CONF_DIR=$DIR/conf"
  [ $n -gt 0 ]
}

[ $# -ge 1 ] || usage
VERB=$1
shift
HDFS=0
YARN=1
case "$VERB ${1:-}" in
"start --hdfs") HDFS=1; shift ;;
"start --hdfs-only") HDFS=1; YARN=0; shift ;;
"start --hosts"*) usage ;; # --hosts needs --hdfs first
"classpath "*) [ $# -eq 0 ] || usage; classpath; exit 0 ;;
"rm "*)
  [ $# -ge 1 ] && [ $# -le 2 ] || usage
  DN_OP=$1
  [[ "$DN_OP" =~ ^(stop|start|kill)$ ]] || usage
  shift
  ;;
"datanode "* | "nodemanager "*)
  [ $# -ge 2 ] && [ $# -le 3 ] || usage
  DN_OP=$1 DN_N=$2
  [[ "$DN_OP" =~ ^(stop|start)$ && "$DN_N" =~ ^[12]$ ]] || usage
  shift 2
  ;;
esac
HOSTS_FILE=
if [ "$VERB" = start ] && [ "$HDFS" = 1 ] && [ "$YARN" = 1 ] && [ "${1:-}" = --hosts ]; then
  [ $# -ge 2 ] || usage
  HOSTS_FILE=$(realpath "$2") || die "no hosts file $2"
  shift 2
fi
# --protection: hadoop.rpc.protection (authentication, integrity, privacy):
# the SASL qop of every token connection (AM to RM and NM, DIGEST-MD5)
PROTECTION=authentication
if [ "$VERB" = start ] && [ "${1:-}" = --protection ]; then
  [ $# -ge 2 ] || usage
  [[ "$2" =~ ^(authentication|integrity|privacy)$ ]] || die "--protection: authentication, integrity or privacy, not $2"
  PROTECTION=$2
  shift 2
fi
# --data-protection: dfs.data.transfer.protection of a Kerberized HDFS
DATA_PROTECTION=
if [ "$VERB" = start ] && [ "${1:-}" = --data-protection ]; then
  [ $# -ge 2 ] || usage
  [[ "$2" =~ ^(authentication|integrity|privacy)(,(authentication|integrity|privacy))*$ ]] ||
    die "--data-protection: authentication, integrity or privacy, or a list of them (integrity,privacy), not $2"
  DATA_PROTECTION=$2
  shift 2
fi
# --encrypt-data ALGO: dfs.encrypt.data.transfer with that cipher (3des, rc4)
ENCRYPT_DATA=
if [ "$VERB" = start ] && [ "${1:-}" = --encrypt-data ]; then
  [ $# -ge 2 ] || usage
  [[ "$2" =~ ^(3des|rc4)$ ]] || die "--encrypt-data: 3des or rc4, not $2"
  ENCRYPT_DATA=$2
  shift 2
fi
# --kerberos KDIR: a Kerberized HDFS (see "Kerberos" above)
KRB=
if [ "$VERB" = start ] && [ "${1:-}" = --kerberos ]; then
  [ $# -ge 2 ] || usage
  [ "$HDFS" = 1 ] && [ "$YARN" = 0 ] || die "--kerberos: with --hdfs-only (YARN under Kerberos is not built yet)"
  KRB=$(realpath "$2") || die "--kerberos: no directory $2"
  for f in krb5.conf realm keytabs/nn.keytab keytabs/dn.keytab keytabs/HTTP.keytab; do
    [ -s "$KRB/$f" ] || die "--kerberos: $KRB/$f is missing (tests/system/kdc.py writes them)"
  done
  shift 2
fi
[ $# -le 1 ] || usage
case ${1:-} in -*) usage ;; esac
DIR=${1:-$(default_dir)}
[ "$VERB" = start ] && mkdir -p "$DIR"
if [ ! -d "$DIR" ]; then
  [ "$VERB" = stop ] && exit 0 # nothing to stop
  die "no cluster in $DIR"
fi
DIR=$(cd "$DIR" && pwd)
# start reads --hosts (or none); the other verbs what start recorded
if [ "$VERB" != start ] && [ -f "$DIR/hosts" ]; then load_hosts "$DIR/hosts"; fi
if [ "$VERB" = start ]; then
  if [ -n "$KRB" ]; then echo "$KRB" >"$DIR/kerberos"; else rm -f "$DIR/kerberos"; fi
elif [ -f "$DIR/kerberos" ]; then
  KRB=$(cat "$DIR/kerberos")
fi
# every JVM (daemons, the format, clients started here) reads KDIR's krb5.conf
if [ -n "$KRB" ]; then JAVA_FAST+=("-Djava.security.krb5.conf=$KRB/krb5.conf"); fi
case $VERB in
start) cmd_start ;;
stop) stop_all ;;
status) cmd_status ;;
datanode) cmd_datanode "$DN_OP" "$DN_N" ;;
nodemanager) cmd_nodemanager "$DN_OP" "$DN_N" ;;
rm) cmd_rm "$DN_OP" ;;
*) usage ;;
esac
