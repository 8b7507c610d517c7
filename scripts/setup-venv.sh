#!/usr/bin/env bash
# setup-venv.sh NAME VENV REQUIREMENTS: makes the virtual environment VENV
# with the pinned packages of REQUIREMENTS from PyPI (for setup-tf.sh,
# setup-spark.sh, bench/yarn/setup-skein.sh and bench/spark/run.sh; NAME is
# what errors say). VENV and REQUIREMENTS: absolute, or from the repository root.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 VENV=$2 REQ=$3
stamp="$VENV/.loom-requirements"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp"; then
  echo "$VENV/bin/python"
  exit 0
fi
# A python that can make a virtual environment with pip: the one on PATH
# (it reaches PyPI), else Debian's with python3-venv.
py=
for c in python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import venv, ensurepip' 2>/dev/null; then
    py=$(command -v "$c")
    break
  fi
done
if [ -z "$py" ]; then
  echo "$NAME: no python3 with venv and ensurepip; install python3-venv" >&2
  exit 1
fi
rm -rf "$VENV"
"$py" -m venv "$VENV" >&2
# git ignores the environment wherever it is (as venv does from Python 3.13)
echo '*' >"$VENV/.gitignore"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
cp "$REQ" "$stamp"
echo "$VENV/bin/python"
