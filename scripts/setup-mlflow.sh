#!/usr/bin/env bash
# setup-mlflow.sh: makes the MLflow environment, .venv-mlflow/, with mlflow
# pinned from PyPI (python/requirements-mlflow.txt): the tracking server
# tests/system/test_mlflow.py starts, and the Python its callers and tasks
# run loom.run(..., mlflow=...) in.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/setup-venv.sh setup-mlflow "${LOOM_MLFLOW_VENV:-$PWD/.venv-mlflow}" "$PWD/python/requirements-mlflow.txt"
