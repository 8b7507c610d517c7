"""A self-contained loom (LOOM_SELF_CONTAINED, the default build): the
`loom` command and libloom.so need glibc alone, and run where a stock node
would be: in a mount namespace in which libuv, libyaml, jansson and
protobuf-c's shared objects, the checkout and the build directory are
hidden. libloom.so carries jansson's shared object beside it
(libloom-deps/, run path $ORIGIN/libloom-deps: Debian's libjansson.a is not
position-independent); everything else is linked in."""
import glob
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD, LIBLOOM, LOOM, ROOT, SANITIZED

# What any Linux node has: glibc's libraries and the kernel's vDSO.
GLIBC = re.compile(r"^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|/lib64/ld-linux-x86-64\.so\.2|"
                   r"lib(c|m|pthread|dl|rt)\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1)$")
# The libraries a stock node does not have (issue 31): hidden in the namespace.
NOT_ON_A_NODE = ("libuv", "libyaml", "libjansson", "libprotobuf-c")
LIBDIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu")
SYSTEM_PYTHON = "/usr/bin/python3"
TIMEOUT = 120


def self_contained(build=BUILD):
    cache = build / "CMakeCache.txt"
    return cache.exists() and "LOOM_SELF_CONTAINED:BOOL=ON" in cache.read_text()


pytestmark = pytest.mark.skipif(not self_contained(),
                                reason=f"{BUILD} is not configured with LOOM_SELF_CONTAINED=ON")


def ldd(path):
    """(name, resolved path or None) for each library ldd lists for path."""
    r = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=True)
    out = []
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+)(?: => (\S+))? \(0x[0-9a-f]+\)$", line)
        assert m, f"ldd {path}: unexpected line {line!r}"
        out.append((m.group(1), m.group(2)))
    return out


def sanitizer_runtime():
    """Names ldd lists for the sanitizer runtimes (libasan, libubsan) and
    what they themselves need: what the ASan build may add to glibc's."""
    names = set()
    for lib in ("libasan.so", "libubsan.so"):
        p = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True,
                           text=True).stdout.strip()
        if os.path.isabs(p):
            names |= {n for n, _ in ldd(os.path.realpath(p))}
    return {n for n in names if not GLIBC.match(n)} | {"libasan.so.8", "libubsan.so.1"}


def is_so_of(name, lib):
    """Whether the file name is a shared object of lib (libyaml: libyaml.so,
    libyaml-0.so.2, libyaml-0.so.2.0.9; not libyaml-cpp.so)."""
    return re.match(rf"^{re.escape(lib)}(-[0-9.]+)?\.so(\.|$)", name) is not None


def shared_objects(prefixes=NOT_ON_A_NODE):
    """The real files (symlinks resolved) of these libraries' shared objects:
    from `ldconfig -p` and the multiarch library directories."""
    found = set()
    ldc = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in ldc.splitlines():
        m = re.match(r"^\s*(\S+) \(.*\) => (\S+)$", line)
        if m and any(is_so_of(m.group(1), p) for p in prefixes):
            found.add(os.path.realpath(m.group(2)))
    for d in LIBDIRS:
        for p in prefixes:
            found |= {os.path.realpath(f) for f in glob.glob(f"{d}/{p}*.so*")
                      if is_so_of(os.path.basename(f), p)}
    return sorted(f for f in found if os.path.isfile(f))


def run_hidden(argv, hide_files=(), hide_dirs=(), env=None, timeout=TIMEOUT):
    """Run argv in a new mount namespace (unshare --mount --propagation
    private) in which each of hide_files reads as empty (/dev/null bound
    over it) and each of hide_dirs is an empty tmpfs. The mounts exist only
    in that namespace and go with its last process; the process group is
    killed on timeout. Returns the CompletedProcess (text)."""
    setup = ["set -e"]
    setup += [f"mount --bind /dev/null {shlex.quote(str(f))}" for f in hide_files]
    # deepest first: a directory inside another is still reachable to hide
    for d in sorted({str(d) for d in hide_dirs}, key=len, reverse=True):
        setup.append(f"mount -t tmpfs -o size=1m,mode=0755 loom-hidden {shlex.quote(d)}")
    setup.append('exec "$@"')
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(setup),
           "hidden", *map(str, argv)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{argv} in the hidden namespace ran past {timeout} s:\n{out}\n{err}")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything it left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def test_ldd_lists_glibc_only():
    extra = sanitizer_runtime() if SANITIZED else set()
    lib_dir = LIBLOOM.parent.resolve()
    for binary in (LOOM, LIBLOOM):
        libs = ldd(binary)
        assert any(n.startswith("libc.so") for n, _ in libs), f"ldd {binary}: {libs}"
        others = []
        for name, where in libs:
            if GLIBC.match(name) or name in extra:
                continue
            # libloom.so's one bundled library: jansson, from libloom-deps/
            if (binary == LIBLOOM and name.startswith("libjansson.so.") and where and
                    Path(where).resolve().parent == lib_dir / "libloom-deps"):
                continue
            others.append((name, where))
        assert not others, f"{binary} needs more than glibc: {others}"
    # jansson travels with libloom.so; libloom.so finds it by its run path
    dyn = subprocess.run(["readelf", "-d", str(LIBLOOM)], capture_output=True, text=True,
                         check=True).stdout
    assert "Library runpath: [$ORIGIN/libloom-deps]" in dyn, dyn
    assert list((lib_dir / "libloom-deps").glob("libjansson.so.*")), lib_dir


def test_libloom_binds_nothing_of_openssl_or_protobuf():
    """libloom.so's OpenSSL and protobuf-c are its own: it neither exports
    nor imports their names, so a program with its own OpenSSL (Python's ssl
    module) keeps it, and libloom.so keeps its."""
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed"
    defined = subprocess.run([nm, "-D", "--defined-only", str(LIBLOOM)], capture_output=True,
                             text=True, check=True).stdout.split("\n")
    names = [l.split()[-1] for l in defined if len(l.split()) == 3]
    assert names and all(re.match(r"^loom_[^_]", n) for n in names), \
        [n for n in names if not n.startswith("loom_")]
    undefined = subprocess.run([nm, "-D", "--undefined-only", str(LIBLOOM)],
                               capture_output=True, text=True, check=True).stdout
    foreign = re.findall(r"\b(?:SSL_|EVP_|OPENSSL_|CRYPTO_|BIO_|HMAC|protobuf_c_|yaml_|uv_)\w*",
                         undefined)
    assert not foreign, f"libloom.so takes these from the process: {sorted(set(foreign))}"


def test_runs_with_the_libraries_and_the_build_hidden(tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (util-linux) for a mount namespace")
    hidden = shared_objects()
    # each of them is there to hide (Debian's -dev packages, which the
    # build needs, install them all)
    for p in NOT_ON_A_NODE:
        assert any(is_so_of(os.path.basename(f), p) for f in hidden), (p, hidden)
    # loom and libloom.so (with libloom-deps/) copied out of the build first
    node = tmp_path / "node"
    node.mkdir()
    loom = node / "loom"
    shutil.copy2(LOOM, loom)
    shutil.copy2(LIBLOOM.resolve(), node / "libloom.so")
    shutil.copytree(LIBLOOM.parent / "libloom-deps", node / "libloom-deps")
    home = tmp_path / "home"
    spec = tmp_path / "job.yaml"
    spec.write_text("name: stock-node\n"
                    "roles: {worker: {instances: 2, command: 'echo hello from $LOOM_INDEX'}}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LOOM_HOME": str(home),
           "NO_COLOR": "1"}
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    dirs = [BUILD.resolve(), ROOT.resolve()]
    for d in dirs:
        assert not str(tmp_path.resolve()).startswith(str(d) + "/"), (tmp_path, d)
    version = (ROOT / "VERSION").read_text().split()[0]

    # The hiding works: inside, every hidden library reads as empty, the
    # checkout and the build are empty, and a program that loads libuv by
    # name cannot.
    probe = "\n".join([
        "for f in " + " ".join(shlex.quote(f) for f in hidden) + "; do",
        '  echo "size $(wc -c < "$f") $f"', "done",
        "for d in " + " ".join(shlex.quote(str(d)) for d in dirs) + "; do",
        '  echo "entries $(ls -A "$d" | wc -l) $d"', "done",
    ])
    if os.access(SYSTEM_PYTHON, os.X_OK):
        probe += ("\n" + SYSTEM_PYTHON + " -c 'import ctypes; ctypes.CDLL(\"libuv.so.1\")' "
                  "2>/dev/null && echo libuv loads || echo libuv hidden")
    r = run_hidden(["sh", "-c", probe], hidden, dirs, env=env)
    assert r.returncode == 0, r.stderr
    sizes = re.findall(r"^size (\d+) (.+)$", r.stdout, re.M)
    assert sorted(f for _, f in sizes) == hidden and all(s == "0" for s, _ in sizes), r.stdout
    entries = re.findall(r"^entries (\d+) (.+)$", r.stdout, re.M)
    assert len(entries) == 2 and all(n == "0" for n, _ in entries), r.stdout
    if os.access(SYSTEM_PYTHON, os.X_OK):
        assert "libuv hidden" in r.stdout, r.stdout
    # ... while outside they are all still there
    assert all(os.path.getsize(f) > 0 for f in hidden)

    r = run_hidden([loom, "--version"], hidden, dirs, env=env)
    assert r.returncode == 0, r.stderr
    assert version in r.stdout, r.stdout

    r = run_hidden([loom, "run", spec], hidden, dirs, env=env)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert "[worker:0] hello from 0" in r.stdout, r.stdout
    assert "[worker:1] hello from 1" in r.stdout, r.stdout
    states = list(home.glob("**/state.json"))
    assert len(states) == 1 and '"succeeded"' in states[0].read_text(), states

    # libloom.so loads there too (jansson from libloom-deps/), after the
    # interpreter's own OpenSSL, which keeps working.
    if os.access(SYSTEM_PYTHON, os.X_OK):
        code = ("import ctypes, ssl, hashlib\n"
                f"lib = ctypes.CDLL({str(node / 'libloom.so')!r})\n"
                "lib.loom_version.restype = ctypes.c_char_p\n"
                "print('version', lib.loom_version().decode())\n"
                "ssl.create_default_context()\n"
                "print('sha', hashlib.sha256(b'loom').hexdigest())\n"
                "print('openssl', ssl.OPENSSL_VERSION)\n")
        penv = dict(env)
        if SANITIZED:
            from conftest import pylib_env
            penv.update(pylib_env())
        r = run_hidden([SYSTEM_PYTHON, "-c", code], hidden, dirs, env=penv)
        assert r.returncode == 0, r.stderr
        assert f"version {version}" in r.stdout, r.stdout
        assert f"sha {hashlib.sha256(b'loom').hexdigest()}" in r.stdout, r.stdout
