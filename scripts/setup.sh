#!/usr/bin/env bash
# setup.sh: installs, from Debian's archive, every package loom needs to
# build, test and run its demo, then builds loom into build/ (and, with
# --sanitize, build-asan/ with AddressSanitizer and UBSan). Idempotent:
# packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake pkg-config git
      libuv1-dev libyaml-dev libjansson-dev libssl-dev zlib1g-dev libcmocka-dev
      libsasl2-dev libsasl2-modules
      krb5-kdc krb5-admin-server krb5-user libkrb5-dev
      libopenblas-dev dataset-fashion-mnist
      python3-torch python3-numpy python3-pytest python3-venv python3-setuptools python3-wheel
      python3-cloudpickle
      protobuf-compiler
      libprotobuf-c-dev protobuf-c-compiler
      openmpi-bin libopenmpi-dev procps iproute2 tcpdump chromium unzip zip
      slurmctld slurmd slurm-client munge
      clang libclang-rt-14-dev clang-format mypy)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
# The YARN tests and scripts/yarn-cluster.sh run Apache Hadoop from Maven
# Central (hadoop/pom.xml): a JDK (17) and Maven, unless some are there.
command -v java >/dev/null || missing+=(default-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -q >&2
  # Daemons (slurmctld, munged, krb5kdc) are started by the tests themselves,
  # never as system services: keep the packages from starting them. (The
  # Kerberos packages write a default /etc/krb5.conf that nothing of loom's
  # tests reads: tests/system/kdc.py gives everything a private KRB5_CONFIG.)
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  # (through env: sudo would drop it, and krb5-config asks for a realm)
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${missing[@]}" >&2
  if [ -n "$made_policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" >&2
if [ "${1:-}" = "--sanitize" ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON \
    -DLOOM_WERROR=ON >/dev/null
  cmake --build build-asan -j"$jobs" >&2
fi
