"""Where the `loom` binary and libloom.so are.

The binary, in order: $LOOM_BIN (and nothing else when it is set); the
package's own copy, loom/_native/bin/loom (a wheel built by
scripts/wheel.sh carries one); the build/ directory of the source tree
this package sits in (PYTHONPATH=python or an editable install:
python/loom/ -> build/loom); the build/ directory of the source tree it
was installed from (recorded by `pip install`); sys.prefix/bin (a virtual
environment or the prefix loom was installed to); PATH.

libloom.so, in order: $LOOM_LIBRARY (or $LOOM_LIB; nothing else when set);
beside the binary $LOOM_BIN names (a build tree) or in its ../lib (an
install prefix); the package's own copy, loom/_native/lib/libloom.so; the
two build/ directories above; sys.prefix/lib; beside or under ../lib of
the binary found on PATH; wherever the dynamic loader finds libloom
(ctypes.util.find_library).

main() is the `loom` console script of a wheel that carries the binary;
fs() runs `loom fs` for the package's modules that move files (HDFS or
local)."""
import ctypes.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Mapping, Optional

from .errors import FsError, NotFound

_HERE = Path(__file__).resolve().parent
# a wheel's copy of the binary and of libloom (setup.py: LOOM_WHEEL_BUILD_DIR)
_NATIVE = _HERE / "_native"


def _build_dirs() -> List[Path]:
    """The build/ directories of the source tree around this package and
    of the one it was installed from."""
    out = [_HERE.parent.parent / "build"]
    try:
        from ._install import SOURCE  # written by setup.py at install time
        if SOURCE:
            out.append(Path(SOURCE) / "build")
    except ImportError:
        pass
    seen: List[Path] = []
    for d in out:
        if d not in seen:
            seen.append(d)
    return seen


def _exe(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def binary() -> str:
    """The path of the `loom` binary the package runs; raises NotFound,
    listing where it looked, when there is none."""
    env = os.environ.get("LOOM_BIN")
    if env:
        if _exe(Path(env)):
            return env
        raise NotFound(f"LOOM_BIN={env} is not an executable file: point LOOM_BIN at the "
                       f"loom binary (build/loom of a build, or <prefix>/bin/loom)", [env])
    looked = ([str(_NATIVE / "bin" / "loom")] + [str(d / "loom") for d in _build_dirs()] +
              [os.path.join(sys.prefix, "bin", "loom")])
    for c in looked:
        if _exe(Path(c)):
            return c
    found = shutil.which("loom")
    if found:
        return found
    looked.append("PATH (" + os.environ.get("PATH", "") + ")")
    raise NotFound("cannot find the loom binary; looked in:\n  " + "\n  ".join(looked) +
                   "\nbuild loom (cmake -S . -B build && cmake --build build) in the source "
                   "tree this package came from, install it (cmake --install build), or set "
                   "LOOM_BIN=/path/to/loom", looked)


def library() -> str:
    """The path of libloom.so for ctypes; raises NotFound, listing where it
    looked, when there is none."""
    env = os.environ.get("LOOM_LIBRARY") or os.environ.get("LOOM_LIB")
    if env:
        if Path(env).is_file():
            return env
        raise NotFound(f"LOOM_LIBRARY={env} is not a file: point it at libloom.so (build/"
                       f"libloom.so of a build, or <prefix>/lib/libloom.so)", [env])
    cands: List[Path] = []
    bin_env = os.environ.get("LOOM_BIN")
    if bin_env:
        b = Path(bin_env).resolve().parent
        cands += [b / "libloom.so", b.parent / "lib" / "libloom.so"]
    cands.append(_NATIVE / "lib" / "libloom.so")
    cands += [d / "libloom.so" for d in _build_dirs()]
    cands.append(Path(sys.prefix) / "lib" / "libloom.so")
    on_path = shutil.which("loom")
    if on_path:
        b = Path(on_path).resolve().parent
        cands += [b / "libloom.so", b.parent / "lib" / "libloom.so"]
    for c in cands:
        if c.is_file():
            return str(c)
    found: Optional[str] = ctypes.util.find_library("loom")
    if found:
        return found
    looked = [str(c) for c in cands] + ["the dynamic loader's path (ctypes.util.find_library)"]
    raise NotFound("cannot find libloom.so; looked in:\n  " + "\n  ".join(looked) +
                   "\nbuild loom (cmake -S . -B build && cmake --build build), install it "
                   "(cmake --install build), or set LOOM_LIBRARY=/path/to/libloom.so", looked)


def main() -> None:
    """The `loom` console script of a wheel that carries the binary: execs
    the binary binary() finds (the wheel's own copy unless $LOOM_BIN says
    otherwise) with this command's arguments."""
    try:
        exe = binary()
    except NotFound as e:
        sys.stderr.write(f"loom: {e}\n")
        sys.exit(127)
    if os.path.realpath(exe) == os.path.realpath(sys.argv[0]):  # LOOM_BIN naming this script
        sys.stderr.write(f"loom: {exe} is this console script, not the loom binary\n")
        sys.exit(127)
    os.execv(exe, [exe] + sys.argv[1:])


def remote(path: str) -> bool:
    """A URL `loom fs` reads and writes itself (hdfs://, as the C side's
    loom__fs_remote), not a local path."""
    return path.startswith("hdfs://")


def local_path(path: str) -> str:
    """path without its file:// scheme."""
    return path[len("file://"):] if path.startswith("file://") else path


def fs(*args: str, env: Optional[Mapping[str, str]] = None, text: bool = True,
       timeout: float = 600.0, check: bool = False) -> "subprocess.CompletedProcess[Any]":
    """`loom fs ARGS`, its output captured (text or bytes): the one runner
    of the modules that read and write hdfs:// paths (pyenv's cache, the
    spill, loom.tensorflow's model directory, the compat modules). Its
    status is left to the caller, or with check=True a failure raises
    FsError (a CommandError and an OSError) with loom's message."""
    r = subprocess.run([binary(), "fs", *args], env=None if env is None else dict(env),
                       stdin=subprocess.DEVNULL, capture_output=True, text=text,
                       timeout=timeout)
    if check and r.returncode:
        err = r.stderr if text else r.stderr.decode(errors="replace")
        raise FsError(f"loom fs {' '.join(args)}: {err.strip()}", r.returncode, r.args)
    return r
