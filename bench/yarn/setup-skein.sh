#!/usr/bin/env bash
# bench/yarn/setup-skein.sh: makes skein's environment for bench/yarn,
# .venv-skein/ in the repository root, with the pinned skein from PyPI
# (bench/yarn/requirements.txt), apart from every other Python here.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout. LOOM_SKEIN_VENV: elsewhere.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV="${LOOM_SKEIN_VENV:-$ROOT/.venv-skein}"
REQ="$HERE/requirements.txt"
stamp="$VENV/.loom-requirements"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && cmp -s "$REQ" "$stamp"; then
  echo "$VENV/bin/python"
  exit 0
fi
py=
for c in python3 /usr/bin/python3; do
  if command -v "$c" >/dev/null && "$c" -c 'import venv, ensurepip' 2>/dev/null; then
    py=$(command -v "$c")
    break
  fi
done
if [ -z "$py" ]; then
  echo "setup-skein: no python3 with venv and ensurepip; install python3-venv" >&2
  exit 1
fi
rm -rf "$VENV"
"$py" -m venv "$VENV" >&2
# git ignores the environment wherever it is (as venv does from Python 3.13)
echo '*' >"$VENV/.gitignore"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
cp "$REQ" "$stamp"
echo "$VENV/bin/python"
