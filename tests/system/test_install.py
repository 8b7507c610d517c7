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


@pytest.mark.skipif(SANITIZED, reason="an ASan libloom needs ASan in the user's program too; "
                    "this test runs in the normal pass")
def test_static_link_with_the_users_own_internal_names(tmp_path):
    """The installed libloom.a defines loom_* only: a program linked
    statically against it may name its own functions as loom's internals
    are named (wire_encode, comm_create, ps_put_u32, ...), without a
    duplicate-definition error, and each side keeps its own (issue 13
    item 5)."""
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    libdir = next(p for p in (prefix / "lib", prefix / "lib/x86_64-linux-gnu") if
                  (p / "pkgconfig/loom.pc").exists())
    # only loom_* defined, in both libraries as installed
    for lib, args in ((libdir / "libloom.a", ["-g"]), (libdir / "libloom.so", ["-D"])):
        out = subprocess.run(["nm", *args, "--defined-only", str(lib)], capture_output=True,
                             text=True, check=True).stdout
        names = [l.split()[2] for l in out.splitlines() if len(l.split()) == 3]
        assert names and all(n.startswith("loom_") and not n.startswith("loom__")
                             for n in names), [n for n in names if not n.startswith("loom_")
                                               or n.startswith("loom__")][:20]
    src = tmp_path / "user.c"
    src.write_text("""
#include <loom.h>
#include <stdio.h>
/* the user's own functions, named as libloom's internals are */
int wire_encode(void) { return 1; }
int comm_create(void) { return 2; }
int comm_allreduce(void) { return 3; }
int ps_put_u32(void) { return 4; }
int ps_state_init(void) { return 5; }
int main(void) {
  loom_t *l;
  int rc = loom_init(&l);
  int mine = wire_encode() + comm_create() + comm_allreduce() + ps_put_u32() + ps_state_init();
  printf("%s %d\\n", loom_err_name(rc), mine);
  return rc == LOOM_ENOENV ? 0 : 1;
}
""")
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    for k in ("LOOM_COORD", "LOOM_SECRET"):
        env.pop(k, None)
    flags = subprocess.run(["pkg-config", "--static", "--cflags", "--libs", "loom"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    # the archive, not the shared library beside it
    flags = ["-l:libloom.a" if f == "-lloom" else f for f in flags]
    exe = tmp_path / "user"
    r = subprocess.run(["cc", str(src), "-o", str(exe), *flags], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # statically linked: no libloom.so needed at run time
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libloom" not in ldd, ldd
    out = subprocess.run([str(exe)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "LOOM_ENOENV 15", (out.stdout, out.stderr)
