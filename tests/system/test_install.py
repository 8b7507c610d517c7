"""`cmake --install` gives headers, both libraries and a pkg-config file
that a user's program builds against."""
import os
import subprocess

import pytest

from conftest import BUILD, ROOT, SANITIZED


@pytest.mark.skipif(SANITIZED, reason="an ASan libloom needs ASan in the user's program too; "
                    "this test runs in the normal pass")
def test_install_and_build_against_pkg_config(tmp_path):
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    libdir = next(p for p in (prefix / "lib", prefix / "lib/x86_64-linux-gnu") if
                  (p / "pkgconfig/loom.pc").exists())
    assert (prefix / "include/loom.h").exists() and (prefix / "include/loom/comm.h").exists()
    assert (libdir / "libloom.a").exists() and (libdir / "libloom.so").exists()
    assert (prefix / "bin/loom").exists()
    src = tmp_path / "user.c"
    src.write_text("""
#include <loom.h>
#include <loom/comm.h>
#include <stdio.h>
int main(void) {
  loom_t *l;
  int rc = loom_init(&l);
  printf("%s\\n", loom_err_name(rc));
  return rc == LOOM_ENOENV ? 0 : 1;
}
""")
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    for k in ("LOOM_COORD", "LOOM_SECRET"):
        env.pop(k, None)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "loom"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    exe = tmp_path / "user"
    subprocess.run(["cc", str(src), "-o", str(exe), *flags, f"-Wl,-rpath,{libdir}"],
                   check=True)
    out = subprocess.run([str(exe)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "LOOM_ENOENV"
