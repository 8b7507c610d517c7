#!/usr/bin/env bash
# bench/recovery: failure-to-training-again time for each restart policy.
exec /usr/bin/python3 "$(dirname "$0")/run.py" "$@"
