"""A stock Linux node, on this machine: what such a node lacks, hidden from a
command run in a mount namespace of its own.

A cluster node that never saw loom has glibc, zlib and its own
/usr/bin/python3, and none of what building and testing loom put here:

  - the repository's checkout (ROOT, wherever CI cloned it: it holds the
    source, build/, build-asan/, .venv-spark/, .venv-tf/),
  - the build directory under test (LOOM_BUILD_DIR) when it is elsewhere,
  - the Python environments setup made (~/.cache/loom/venvs, and those
    LOOM_SPARK_PYTHON / LOOM_TF_PYTHON name),
  - the shared objects of libuv, libyaml, jansson and protobuf-c
    (LIBRARIES), that loom links and Debian installs as -dev packages.

lacks() lists them as they are here (the directories, and every shared
object file of those libraries, symbolic links resolved). wrap(cmd, ...)
is the command line that runs cmd in a new mount namespace (private
propagation: nothing mounted there is seen outside, and it all goes away
with its last process) in which each of those directories is an empty
tmpfs and each of those files /dev/null (a dlopen of it fails: "file too
short"), and, with tmp=DIR, /tmp is DIR (a host's own /tmp: the machine's
/tmp, its pytest directories and /tmp/build-* included, is gone). keep=
paths under /tmp stay visible at their own paths inside that /tmp (a
daemon's configuration and data directories). It needs root (mount).

    subprocess.run(hidden.wrap(["ldd", "build/loom"], tmp=host_tmp))

wrap_builds(cmd) hides only the loom build directories (build_dirs():
the checkout's build*/, LOOM_BUILD_DIR, every /tmp/build-*), each an empty
tmpfs, and leaves the rest as it is: the Slurm and Spark harnesses run
each slurmd and Spark Worker so, and a task there can run only the loom
its backend shipped.

As a command: python3 tests/system/hidden.py [--tmp DIR] [--keep PATH]...
-- CMD... (what it hides: python3 tests/system/hidden.py --list)."""
import glob
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the libraries loom links that a stock node does not have: file name
# patterns of their shared objects
LIBRARIES = {
    "libuv": ("libuv.so*",),
    "libyaml": ("libyaml-0.so*", "libyaml.so*"),
    "jansson": ("libjansson.so*",),
    "protobuf-c": ("libprotobuf-c.so*",),
}
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/local/lib", "/usr/local/lib64", "/lib/x86_64-linux-gnu", "/lib64", "/lib")


def library_files():
    """{library: [its shared object files]} (real paths, regular files)."""
    out = {}
    for lib, patterns in LIBRARIES.items():
        files = set()
        for d in LIB_DIRS:
            for pat in patterns:
                for p in glob.glob(os.path.join(d, pat)):
                    r = os.path.realpath(p)
                    if os.path.isfile(r):
                        files.add(r)
        out[lib] = sorted(files)
    return out


def _venv_of(python):
    """The environment directory of an interpreter path (.../bin/python)."""
    p = Path(python)
    return p.parent.parent if p.parent.name == "bin" else None


def lacked_dirs(build=None):
    """The directories a stock node does not have, those that exist here."""
    cands = [ROOT, Path.home() / ".cache" / "loom" / "venvs"]
    b = build or os.environ.get("LOOM_BUILD_DIR")
    if b:
        cands.append(ROOT / b)  # an absolute one stays absolute
    for var in ("LOOM_SPARK_PYTHON", "LOOM_TF_PYTHON"):
        if os.environ.get(var):
            v = _venv_of(os.environ[var])
            if v:
                cands.append(v)
    out = []
    for c in cands:
        c = Path(os.path.realpath(c))
        if c.is_dir() and c not in out:
            out.append(c)
    return out


def lacks(build=None):
    """(directories, files): what wrap() hides."""
    return lacked_dirs(build), [f for fs in library_files().values() for f in fs]


def _under(p, d):
    p, d = str(p), str(d)
    return p == d or p.startswith(d.rstrip("/") + "/")


def wrap(cmd, tmp=None, keep=(), hostname=None, etc_hosts=None, build=None):
    """The command line that runs cmd in a mount namespace of its own with
    lacks() hidden, /tmp replaced by tmp (a directory) if given, the paths
    in keep (under /tmp) visible at their own paths there, /etc/hosts
    replaced by the file etc_hosts and, with hostname, a UTS namespace of
    its own with that host name. It starts in /. The chain of execs keeps
    one pid: the pid of the wrapped command is that of the wrapper."""
    dirs, files = lacks(build)
    if tmp is not None:
        tmp = os.path.realpath(tmp)
        for k in keep:
            if not _under(os.path.realpath(k), "/tmp"):
                raise ValueError(f"keep: {k} is not under /tmp")
        dirs = [d for d in dirs if not _under(d, "/tmp")]  # the new /tmp has none of them
    elif keep:
        raise ValueError("keep needs tmp")
    # a directory under another hidden one is hidden with it
    dirs = [d for d in dirs if not any(o != d and _under(d, o) for o in dirs)]
    for p in [tmp, *keep, etc_hosts]:
        if p is not None and any(_under(os.path.realpath(p), d) for d in dirs):
            raise ValueError(f"{p} is in a directory that is hidden")
    q = shlex.quote
    lines = ["set -e"]
    if tmp is not None:
        for k in keep:
            k = os.path.realpath(k)
            at = tmp + k[len("/tmp"):]  # k's place in the new /tmp
            lines.append(f"mkdir -p {q(at)} && mount --bind {q(k)} {q(at)}")
    lines += [f"mount --bind /dev/null {q(f)}" for f in files]
    lines += [f"mount -t tmpfs -o size=64k,mode=0755 loom-hidden {q(str(d))}" for d in dirs]
    if etc_hosts is not None:
        lines.append(f"mount --bind {q(os.path.realpath(etc_hosts))} /etc/hosts")
    if hostname is not None:
        lines.append(f"hostname {q(hostname)}")
    if tmp is not None:
        # recursive: the kept paths bound under tmp come along
        lines.append(f"mount --rbind {q(tmp)} /tmp")
    lines += ["cd /", 'exec "$@"']
    ns = ["--mount", "--propagation", "private"] + (["--uts"] if hostname is not None else [])
    return ["unshare", *ns, "--", "sh", "-c", "\n".join(lines), "hidden", *map(str, cmd)]


def run(cmd, tmp=None, keep=(), **kw):
    """subprocess.run of wrap(cmd, tmp, keep); kw go to subprocess.run."""
    return subprocess.run(wrap(cmd, tmp=tmp, keep=keep), **kw)


# ---- only the build directories (the Slurm and Spark harnesses) ----

def build_dirs(build=None):
    """The loom build directories that exist here: the checkout's build*/
    (build/, build-asan/), the one under test (LOOM_BUILD_DIR, or build)
    and every /tmp/build-* (where a session builds apart from the
    checkout). Real paths, each once."""
    cands = sorted(ROOT.glob("build*")) + sorted(Path("/tmp").glob("build-*"))
    b = build or os.environ.get("LOOM_BUILD_DIR")
    if b:
        cands.append(ROOT / b)  # an absolute one stays absolute
    out = []
    for c in cands:
        c = Path(os.path.realpath(c))
        if c.is_dir() and c not in out:
            out.append(c)
    return out


def wrap_builds(cmd, build=None):
    """The command line that runs cmd in a mount namespace of its own
    (private propagation) in which each of build_dirs(build) is an empty
    tmpfs, and nothing else changes: the checkout's python/ and Python
    environments, the libraries and /tmp stay as they are. A daemon
    started so (a slurmd, a Spark Worker) and all it starts run only the
    loom binary its backend shipped them. It keeps the working directory
    (unless that is hidden: then /) and, as wrap(), one pid along its
    chain of execs. It needs root (mount)."""
    dirs = build_dirs(build)
    dirs = [d for d in dirs if not any(o != d and _under(d, o) for o in dirs)]
    q = shlex.quote
    lines = ["set -e"]
    # (one gone since build_dirs() listed it has nothing left to hide)
    lines += [f"if [ -d {q(str(d))} ]; then mount -t tmpfs -o size=64k,mode=0755 loom-hidden "
              f"{q(str(d))}; fi" for d in dirs]
    cwd = os.getcwd()
    if any(_under(cwd, d) for d in dirs):
        lines.append("cd /")
    lines.append('exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "\n".join(lines),
            "hidden-builds", *map(str, cmd)]


def main(argv):
    tmp, keep = None, []
    args = list(argv)
    if args == ["--list"]:
        dirs, _ = lacks()
        for d in dirs:
            print(f"dir  {d}")
        for lib, fs in library_files().items():
            for f in fs:
                print(f"file {f} ({lib})")
        return 0
    while args and args[0] != "--":
        a = args.pop(0)
        if a == "--tmp" and args:
            tmp = args.pop(0)
        elif a == "--keep" and args:
            keep.append(args.pop(0))
        else:
            print(__doc__.split("\n\n")[-1], file=sys.stderr)
            return 2
    if not args[1:]:
        print("usage: hidden.py [--tmp DIR] [--keep PATH]... -- CMD...", file=sys.stderr)
        return 2
    os.execvp("unshare", wrap(args[1:], tmp=tmp, keep=keep))
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
