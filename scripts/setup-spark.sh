#!/usr/bin/env bash
# setup-spark.sh: makes the Spark environment, .venv-spark/, with pinned
# pyspark, pyarrow and pandas from PyPI (python/requirements-spark.txt).
# Its interpreter is the Spark driver's and the executors' (PYSPARK_PYTHON);
# Spark itself runs on the JDK 17 that scripts/setup.sh installs.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${LOOM_SPARK_VENV:-$PWD/.venv-spark}"
REQ="$PWD/python/requirements-spark.txt"
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
  echo "setup-spark: no python3 with venv and ensurepip; install python3-venv" >&2
  exit 1
fi
rm -rf "$VENV"
"$py" -m venv "$VENV" >&2
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ" >&2
cp "$REQ" "$stamp"
echo "$VENV/bin/python"
