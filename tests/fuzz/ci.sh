#!/usr/bin/env bash
# ci.sh: the fuzzing step of CI: builds build-fuzz/ (clang, ASan, UBSan)
# and runs every harness for LOOM_FUZZ_SECONDS seconds each (default 30),
# as many at a time as there are cores (JOBS), starting from the committed corpus; prints one line
# per harness (tests/fuzz/run.sh) and exits non-zero if any found a crash,
# a sanitizer report, a leak or a timeout (the input is then in
# build-fuzz/artifacts/<harness>/: add it to tests/fuzz/corpus/<harness>/
# with the fix). Total: about 15 x LOOM_FUZZ_SECONDS / cores plus the build.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${LOOM_FUZZ_SECONDS:-30}
SECONDS=$secs KEEP_GOING=1 JOBS=${JOBS:-$(nproc)} tests/fuzz/run.sh
rc=$?
[ $rc -eq 0 ] && echo "ci.sh: every harness ran ${secs} s without a finding"
exit $rc
