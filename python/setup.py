"""Records, in the installed package, the source tree it was installed
from (loom/_install.py: SOURCE), so an installed loom finds that tree's
build/loom and build/libloom.so without LOOM_BIN, and loom's version
(VERSION: the file VERSION, as pyproject.toml's version is). Everything
else is in pyproject.toml."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "VERSION")) as f:
    VERSION = f.read().strip()


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not self.dry_run:
            out = os.path.join(self.build_lib, "loom", "_install.py")
            with open(out, "w") as f:
                f.write('"""Written by setup.py when the package was built."""\n'
                        f"SOURCE = {SOURCE!r}\n"
                        f"VERSION = {VERSION!r}\n")


setup(cmdclass={"build_py": BuildPy})
