#!/usr/bin/env bash
# setup-venv.sh NAME VENV REQUIREMENTS: makes the virtual environment VENV
# with the pinned packages of REQUIREMENTS from PyPI (for setup-tf.sh,
# setup-spark.sh, bench/yarn/setup-skein.sh and bench/spark/run.sh; NAME is
# what errors say). VENV and REQUIREMENTS: absolute, or from the repository root.
# Idempotent: an environment that already has the pinned versions is kept.
# The environment itself is made once per machine and user, in
# ${LOOM_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/venvs}/NAME-HASH
# (HASH: of REQUIREMENTS' content), and VENV is a link to it: a second
# clone of the repository (CI's) reuses it instead of fetching it again.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1 VENV=$2 REQ=$3
stamp="$VENV/.loom-requirements"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp"; then
  echo "$VENV/bin/python"
  exit 0
fi
cache=${LOOM_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/venvs}
real="$cache/${NAME//\//-}-$(sha256sum "$REQ" | cut -c1-16)"
link_venv() {
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  ln -s "$real" "$VENV"
  echo "$VENV/bin/python"
}
if [ -x "$real/bin/python" ] && [ -f "$real/.loom-requirements" ] &&
   cmp -s "$REQ" "$real/.loom-requirements"; then
  link_venv
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
rm -rf "$real"
mkdir -p "$cache"
"$py" -m venv "$real" >&2
# git ignores the environment wherever it is (as venv does from Python 3.13)
echo '*' >"$real/.gitignore"
"$real/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
cp "$REQ" "$real/.loom-requirements"
link_venv
