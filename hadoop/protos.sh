#!/usr/bin/env bash
# protos.sh: regenerates src/hadoop/proto/*.proto and src/yarn/proto/*.proto,
# the Hadoop IPC, HDFS and YARN message definitions loom's C client is
# generated from (protoc-c, at build time), out of the jars of the Hadoop
# that hadoop/pom.xml pins.
# Hadoop's Maven artifacts carry no .proto file (nor do its -sources
# jars), but every generated Java class holds its file's descriptor:
# hadoop/ProtoDump.java prints those back as .proto text. Run it after
# changing the Hadoop version or to add a protocol (name its outer class
# below), and commit the result. Needs java, mvn and protoc.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=src/hadoop/proto
# YARN's messages: the loom command's (src/yarn/); they import the common ones
YARN_OUT=src/yarn/proto
CLASSES=(
  org.apache.hadoop.ipc.protobuf.RpcHeaderProtos
  org.apache.hadoop.ipc.protobuf.IpcConnectionContextProtos
  org.apache.hadoop.ipc.protobuf.ProtobufRpcEngine2Protos
  org.apache.hadoop.security.proto.SecurityProtos
  org.apache.hadoop.yarn.proto.YarnProtos
  org.apache.hadoop.yarn.proto.YarnServiceProtos
  org.apache.hadoop.yarn.proto.ApplicationClientProtocol
  org.apache.hadoop.yarn.proto.ApplicationMasterProtocol
  org.apache.hadoop.yarn.proto.ContainerManagementProtocol
  org.apache.hadoop.hdfs.protocol.proto.ClientNamenodeProtocolProtos
  org.apache.hadoop.hdfs.protocol.proto.DataTransferProtos
)
cp=$(mktemp)
trap 'rm -f "$cp"' EXIT
mvn -q -B -f hadoop/pom.xml dependency:build-classpath -Dmdep.outputFile="$cp" >&2
rm -f "$OUT"/*.proto "$YARN_OUT"/*.proto
java -cp "$(cat "$cp")" hadoop/ProtoDump.java "$OUT" "${CLASSES[@]}"
mv "$OUT"/yarn_*.proto "$OUT"/application*_protocol.proto "$OUT"/containermanagement_protocol.proto \
  "$YARN_OUT"/
# what protoc makes of the printed files must be what the jars hold
set_pb=$(mktemp)
trap 'rm -f "$cp" "$set_pb"' EXIT
protoc -I"$OUT" -I"$YARN_OUT" --include_imports --descriptor_set_out="$set_pb" \
  $(cd "$OUT" && ls *.proto) $(cd "$YARN_OUT" && ls *.proto)
java -cp "$(cat "$cp")" hadoop/ProtoDump.java --verify "$set_pb" "${CLASSES[@]}"
ls "$OUT" "$YARN_OUT"
