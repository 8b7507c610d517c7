#!/usr/bin/env bash
# setup-tf.sh: makes the TensorFlow environment, .venv-tf/, with pinned
# tensorflow-cpu and tensorboard from PyPI (python/requirements-tf.txt).
# It is kept apart from Debian's python3-torch and numpy (/usr/bin/python3):
# TensorFlow wants a newer numpy than Debian's torch was built against.
# Idempotent: an environment that already has the pinned versions is kept.
# Prints the environment's python on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/setup-venv.sh setup-tf "${LOOM_TF_VENV:-$PWD/.venv-tf}" "$PWD/python/requirements-tf.txt"
