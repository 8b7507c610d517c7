#!/usr/bin/env bash
# setup-tf.sh: makes the TensorFlow environment, .venv-tf/, with pinned
# tensorflow-cpu and tensorboard from PyPI (python/requirements-tf.txt).
# It is kept apart from Debian's python3-torch and numpy (/usr/bin/python3):
# TensorFlow wants a newer numpy than Debian's torch was built against.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${LOOM_TF_VENV:-$PWD/.venv-tf}"
REQ="$PWD/python/requirements-tf.txt"
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
  echo "setup-tf: no python3 with venv and ensurepip; install python3-venv" >&2
  exit 1
fi
rm -rf "$VENV"
"$py" -m venv "$VENV" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
cp "$REQ" "$stamp"
echo "$VENV/bin/python"
