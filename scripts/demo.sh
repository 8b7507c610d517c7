#!/usr/bin/env bash
# demo.sh: sets up loom (scripts/setup.sh) and runs the demo job: a C MLP
# trained data-parallel on Fashion-MNIST by one chief and three workers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec build/loom run examples/fashion-mnist/job.yaml "$@"
