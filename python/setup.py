"""Records, in the installed package, the source tree it was installed
from (loom/_install.py: SOURCE), so an installed loom finds that tree's
build/loom and build/libloom.so without LOOM_BIN, and loom's version
(VERSION: the file VERSION, as pyproject.toml's version is).

With LOOM_WHEEL_BUILD_DIR set to a self-contained build (LOOM_SELF_CONTAINED,
built: scripts/wheel.sh), the package also carries that build's `loom`,
libloom.so and libloom-deps/ in loom/_native/ (bin/, lib/: an install
prefix's layout), the wheel is platform-tagged (py3-none-linux_x86_64: no
Python extension, but native files), it gets the `loom` console script
(loom._find:main, which execs loom/_native/bin/loom), and SOURCE is None:
the wheel is not tied to the tree it was built from. Everything else is in
pyproject.toml."""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel  # type: ignore

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "VERSION")) as f:
    VERSION = f.read().strip()
NATIVE = os.environ.get("LOOM_WHEEL_BUILD_DIR") or None


def native_files(build):
    """(source, path under loom/_native, executable) of what the wheel
    carries from the build directory; SystemExit when it is not a built,
    self-contained, unsanitized build."""
    cache = os.path.join(build, "CMakeCache.txt")
    if not os.path.isfile(cache):
        raise SystemExit(f"LOOM_WHEEL_BUILD_DIR={build}: no CMakeCache.txt (not a build "
                         f"directory)")
    with open(cache) as f:
        text = f.read()
    if "LOOM_SELF_CONTAINED:BOOL=ON" not in text:
        raise SystemExit(f"LOOM_WHEEL_BUILD_DIR={build} is not configured with "
                         f"-DLOOM_SELF_CONTAINED=ON: its loom needs the build machine's "
                         f"libraries")
    if "LOOM_SANITIZE:BOOL=ON" in text:
        raise SystemExit(f"LOOM_WHEEL_BUILD_DIR={build} is the sanitized build")
    out = [(os.path.join(build, "loom"), "bin/loom", True),
           # the real file, by its link name: ctypes loads it by path
           (os.path.realpath(os.path.join(build, "libloom.so")), "lib/libloom.so", True)]
    deps = os.path.join(build, "libloom-deps")  # found by libloom.so's $ORIGIN/libloom-deps
    if os.path.isdir(deps):
        out += [(os.path.join(deps, n), "lib/libloom-deps/" + n, False)
                for n in sorted(os.listdir(deps))]
    for src, _, _ in out:
        if not os.path.isfile(src):
            raise SystemExit(f"LOOM_WHEEL_BUILD_DIR={build}: {src} is missing (build the "
                             f"loom and loom_shared targets)")
    return out


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if self.dry_run:
            return
        out = os.path.join(self.build_lib, "loom", "_install.py")
        with open(out, "w") as f:
            f.write('"""Written by setup.py when the package was built."""\n'
                    f"SOURCE = {None if NATIVE else SOURCE!r}\n"
                    f"VERSION = {VERSION!r}\n")
        native = os.path.join(self.build_lib, "loom", "_native")
        shutil.rmtree(native, ignore_errors=True)  # nothing left from an earlier build
        if NATIVE:
            for src, rel, exe in native_files(NATIVE):
                dst = os.path.join(native, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o755 if exe else 0o644)


class NativeDistribution(Distribution):
    """With the native files: platform-specific (build/lib.<platform>, the
    wheel's root is platlib), as a distribution with extensions is."""

    def has_ext_modules(self) -> bool:
        return bool(NATIVE) or super().has_ext_modules()


class BdistWheel(bdist_wheel):
    """With the native files: tagged py3-none-<platform> (no extension
    module: any Python 3 on that platform)."""

    def get_tag(self):
        py, abi, plat = super().get_tag()
        return ("py3", "none", plat) if NATIVE else (py, abi, plat)


setup(distclass=NativeDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
      entry_points={"console_scripts": ["loom = loom._find:main"]} if NATIVE else {})
