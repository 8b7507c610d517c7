#!/usr/bin/env bash
# setup-spark.sh: makes the Spark environment, .venv-spark/, with pinned
# pyspark, pyarrow and pandas from PyPI (python/requirements-spark.txt).
# Its interpreter is the Spark driver's and the executors' (PYSPARK_PYTHON);
# Spark itself runs on the JDK 17 that scripts/setup.sh installs.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/setup-venv.sh setup-spark "${LOOM_SPARK_VENV:-$PWD/.venv-spark}" "$PWD/python/requirements-spark.txt"
