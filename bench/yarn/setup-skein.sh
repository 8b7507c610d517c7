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
exec bash "$ROOT/scripts/setup-venv.sh" setup-skein "$VENV" "$REQ"
