"""python= of loom.run(fn): the tasks' Python environment and the caller's
own modules go with the job, cached on the cluster's filesystem.

Two archives reach every task, as the spec's `archives` (YARN localizes
them; the local and Slurm backends unpack them into the task's directory):

  loom-py   the loom package (libloom.so with it, in loom/_native/lib),
            the modules of the directory of the calling script (its .py
            files and packages) and of the caller's editable installs;
            the tasks' PYTHONPATH. Always shipped off the local backend.
  loom-env  python="auto": the active virtual environment's
            site-packages. The tasks run the node's own python3.X (the
            caller's major.minor, on the task's PATH) and loom-py's
            sitecustomize adds loom-env as a site directory (its .pth
            files work), for the task's process and every Python process
            it starts.
            python="ENV.tar.gz" (.tgz, .tar, .zip; a local path or an
            hdfs:// URL): an environment packed whole (conda-pack,
            venv-pack), unpacked at loom-env; the tasks run
            loom-env/bin/python.

Each archive is named by a SHA-256 of what it holds (for an environment:
every file's path, size and time under site-packages, __pycache__ left
out; for loom-py: every file's bytes) and kept in a per-user cache:
hdfs:///user/<user>/.loom/cache/ on YARN with an HDFS default filesystem,
else <LOOM_HOME>/cache/ on this host. An archive already in the cache is
neither packed nor uploaded again. See docs/python.md, "The environment
goes with the job"."""
import ast
import hashlib
import os
import pwd
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._find import library
from .errors import BackendError, NotFound, PackError

ENV = "loom-env"
OWN = "loom-py"
ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_OWN = 256 << 20  # the caller's modules, at most (a data directory beside a script is a mistake)

PythonLike = Union[None, str, Mapping[str, str]]


@dataclass
class Shipment:
    """What build() adds to a loom.run(fn) job."""
    archives: Dict[str, str] = field(default_factory=dict)  # target: cached archive
    interpreter: Dict[Optional[str], str] = field(default_factory=dict)  # by role label
    env: Dict[str, str] = field(default_factory=dict)
    shipped: List[Dict[str, Any]] = field(default_factory=list)  # what, url, sha256, bytes...

    def python_for(self, label: Optional[str]) -> str:
        if label in self.interpreter:
            return self.interpreter[label]
        for k in (None, "", "cpu", "default"):
            if k in self.interpreter:
                return self.interpreter[k]
        raise ValueError(f"loom.run(fn): python= names no environment for the node label "
                         f"{label!r} nor a default (keys {sorted(map(str, self.interpreter))}; "
                         "give one for each label the roles use, or 'cpu' for the roles without "
                         "one)")


def is_archive(v: str) -> bool:
    return v.lower().endswith(ARCHIVES)


def wants_shipping(backend: str, python: PythonLike) -> bool:
    """Whether a job of this backend with this python= ships archives: every
    backend but local (whose tasks see the caller's files), and any backend
    given an archive."""
    if backend != "local":
        return True
    vals: List[Any] = list(python.values()) if isinstance(python, Mapping) else [python]
    return any(isinstance(v, str) and is_archive(v) for v in vals)


# ---- what is installed ----------------------------------------------------

def active_env() -> Tuple[str, str]:
    """("venv" | "conda", prefix) of the running interpreter; PackError when
    it runs in neither."""
    if os.path.isdir(os.path.join(sys.prefix, "conda-meta")):
        return "conda", sys.prefix
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        return "venv", sys.prefix
    raise PackError(f"python='auto' packs the active virtual environment, and {sys.executable} "
                    "runs in none (sys.prefix is its installation): activate a virtualenv "
                    "(python -m venv) with what the function needs, or give python= an "
                    "environment archive (.tar.gz) or an interpreter the nodes have")


def site_dirs() -> List[str]:
    """The environment's site-packages directories (purelib, platlib)."""
    out: List[str] = []
    for k in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(k)
        if p and os.path.isdir(p) and os.path.realpath(p) not in [os.path.realpath(o) for o in out]:
            out.append(p)
    if not out:
        raise PackError(f"python='auto': {sys.prefix} has no site-packages directory "
                        f"({sysconfig.get_paths().get('purelib')})")
    return out


def _walk(top: str) -> Iterator[Tuple[str, os.stat_result]]:
    """(path relative to top, lstat) of everything under top, sorted, with
    __pycache__ left out (written by imports: not what is installed)."""
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for name in sorted(files) + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, name)
            try:
                yield os.path.relpath(p, top), os.lstat(p)
            except OSError as e:
                raise PackError(f"cannot read {p}: {e.strerror}") from None


def env_digest(dirs: List[str]) -> str:
    """A SHA-256 of what is installed: the Python version and every file's
    path, size and modification time under dirs."""
    h = hashlib.sha256(f"loom-env 1 {sys.implementation.cache_tag}".encode())
    for d in dirs:
        h.update(b"\0dir\0")
        for rel, st in _walk(d):
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _tar(out: str, dirs: List[str]) -> None:
    """out: a .tar.gz of the contents of dirs (merged at its top),
    __pycache__ left out, compressed fast (gzip -1)."""
    argv = ["tar", "--exclude=__pycache__", "-I", "gzip -1", "-cf", out]
    for d in dirs:
        argv += ["-C", d, "."]
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode:
        raise PackError(f"cannot pack {', '.join(dirs)} into {out}: tar exited with "
                        f"{r.returncode}: {r.stderr.strip()[-2000:]}")


# ---- the caller's own modules ---------------------------------------------

def _modules_of(top: str) -> List[str]:
    """The importable modules directly in top: .py files and package
    directories (with an __init__.py), not hidden, not loom's."""
    try:
        names = sorted(os.listdir(top))
    except OSError:
        return []
    out = []
    for n in names:
        p = os.path.join(top, n)
        if n.startswith(".") or n in ("loom", "__pycache__"):
            continue
        if n.endswith(".py") and os.path.isfile(p) and n != "sitecustomize.py":
            out.append(n)
        elif os.path.isfile(os.path.join(p, "__init__.py")):
            out.append(n)
    return out


def editable_roots() -> Dict[str, str]:
    """{module name: its directory or file} of the environment's editable
    installs: directories a .pth file adds, and the MAPPING of setuptools'
    __editable__ finders."""
    out: Dict[str, str] = {}
    try:
        dirs = site_dirs()
    except PackError:
        return out
    for sp in dirs:
        for n in sorted(os.listdir(sp)):
            p = os.path.join(sp, n)
            if n.endswith(".pth"):
                try:
                    lines = Path(p).read_text(errors="replace").splitlines()
                except OSError:
                    continue
                for line in lines:
                    line = line.strip()
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    d = os.path.join(sp, line)
                    if os.path.isdir(d) and not os.path.realpath(d).startswith(
                            os.path.realpath(sys.prefix) + os.sep):
                        for m in _modules_of(d):
                            out.setdefault(m.removesuffix(".py"), os.path.join(d, m))
            elif n.startswith("__editable__") and n.endswith("_finder.py"):
                try:
                    found = re.search(r"^MAPPING\s*(?::[^=\n]*)?=\s*(\{.*?\})\s*$",
                                      Path(p).read_text(errors="replace"), re.M | re.S)
                    mapping = ast.literal_eval(found[1]) if found else {}
                except (OSError, ValueError, SyntaxError):
                    continue
                for name, path in mapping.items():
                    if isinstance(name, str) and isinstance(path, str) and os.path.exists(path):
                        out.setdefault(name, path)
    out.pop("loom", None)
    return out


def _copy(src: str, dst: str) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dst, symlinks=False,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)


SITECUSTOMIZE = '''"""Written by loom.run(fn, python=...): the job's shipped environment."""
import os
import site

_top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _d in {sites!r}:
    if os.path.isdir(os.path.join(_top, _d)):
        site.addsitedir(os.path.join(_top, _d))
# absolute, for the Python processes the task starts in other directories
os.environ["PYTHONPATH"] = os.pathsep.join(
    os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
'''


def _own_mods(caller_dir: Optional[str]) -> Dict[str, str]:
    """{name in loom-py: its source}: the caller's modules, then its
    editable installs."""
    mods: Dict[str, str] = {}
    if caller_dir and os.path.isdir(caller_dir):
        for m in _modules_of(caller_dir):
            mods[m] = os.path.join(caller_dir, m)
    for name, path in editable_roots().items():
        base = os.path.basename(path)
        mods.setdefault(base if base.removesuffix(".py") == name else name, path)
    return mods


def own_key(caller_dir: Optional[str], sites: List[str]) -> str:
    """A key for what own_tree would copy, without copying or reading it:
    every source file's path, size and modification time (as env_digest),
    the library's, and the sites. A process that ships again with the same
    key has loom-py's digest already (_OWN_DIGESTS)."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.realpath(library())
    tops = [pkg, os.path.join(os.path.dirname(pkg), "VERSION"), lib,
            os.path.join(os.path.dirname(lib), "libloom-deps")]
    mods = _own_mods(caller_dir)
    h = hashlib.sha256(f"loom-py-sources 1 {sites!r}".encode())
    for name, top in [("", t) for t in tops] + sorted(mods.items()):
        h.update(f"\0top\0{name}\0{top}\0".encode())
        if os.path.isdir(top):
            for rel, st in _walk(top):
                h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\0".encode())
        elif os.path.exists(top):
            st = os.stat(top)
            h.update(f"{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\0".encode())
    return h.hexdigest()


# own_key -> tree_digest of the loom-py it made, for this process
_OWN_DIGESTS: Dict[str, str] = {}


def own_tree(dst: str, caller_dir: Optional[str], sites: List[str]) -> None:
    """dst: the loom package (with libloom.so), the caller's modules and
    editable installs, and a sitecustomize adding sites."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(pkg, os.path.join(dst, "loom"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_native"))
    version = os.path.join(os.path.dirname(pkg), "VERSION")  # loom.__version__ from a checkout
    if os.path.isfile(version):
        shutil.copy2(version, os.path.join(dst, "VERSION"))
    lib = os.path.realpath(library())
    libdir = os.path.join(dst, "loom", "_native", "lib")
    os.makedirs(libdir)
    shutil.copy2(lib, os.path.join(libdir, "libloom.so"))
    deps = os.path.join(os.path.dirname(lib), "libloom-deps")
    if os.path.isdir(deps):
        shutil.copytree(deps, os.path.join(libdir, "libloom-deps"))
    mods = _own_mods(caller_dir)
    for m, src in mods.items():
        try:
            _copy(src, os.path.join(dst, m))
        except (OSError, shutil.Error) as e:
            raise PackError(f"cannot copy the module {src} for the tasks: {e}") from None
    with open(os.path.join(dst, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE.format(sites=sites))
    total = sum(st.st_size for _, st in _walk(dst))
    if total > MAX_OWN:
        raise PackError(f"the modules shipped with the job ({dst}: loom, {', '.join(mods)}) "
                        f"come to {total >> 20} MiB, more than {MAX_OWN >> 20} MiB: keep data "
                        "out of the calling script's directory (ship it with files=, or read it "
                        "from HDFS)")


def tree_digest(top: str) -> str:
    h = hashlib.sha256(b"loom-py 1")
    for rel, st in _walk(top):
        p = os.path.join(top, rel)
        h.update(f"\0{rel}\0{st.st_mode & 0o111}\0".encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# ---- the cache ------------------------------------------------------------

def _loom_fs(e: Mapping[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    from ._find import fs
    return fs(*args, env=e)


def default_fs(e: Mapping[str, str]) -> Optional[str]:
    """fs.defaultFS of $HADOOP_CONF_DIR/core-site.xml when it is hdfs://."""
    d = e.get("HADOOP_CONF_DIR")
    if not d:
        return None
    try:
        root = ET.parse(os.path.join(d, "core-site.xml")).getroot()
    except (OSError, ET.ParseError):
        return None
    for p in root.iter("property"):
        if (p.findtext("name") or "").strip() == "fs.defaultFS":
            v = (p.findtext("value") or "").strip().rstrip("/")
            return v if v.startswith("hdfs://") else None
    return None


class Cache:
    """The per-user cache of archives: on HDFS for YARN with an HDFS
    default filesystem, else a directory of this host."""

    def __init__(self, backend: str, e: Mapping[str, str]):
        self.e = e
        fs = default_fs(e) if backend == "yarn" else None
        if fs:
            user = e.get("HADOOP_USER_NAME") or pwd.getpwuid(os.getuid()).pw_name
            self.base = f"{fs}/user/{user}/.loom/cache"
            self.remote = True
        else:
            home = e.get("LOOM_HOME") or os.path.join(os.path.expanduser("~"), ".loom")
            self.base = os.path.join(os.path.abspath(home), "cache")
            self.remote = False

    def url(self, name: str) -> str:
        return f"{self.base}/{name}" if self.remote else os.path.join(self.base, name)

    def has(self, name: str) -> bool:
        if not self.remote:
            return os.path.isfile(self.url(name))
        argv = ["stat", self.url(name)]
        r = _loom_fs(self.e, *argv)
        if r.returncode in (0, 1):  # 1: not there (or not readable: put says which)
            return r.returncode == 0
        raise BackendError(f"cannot read the cache {self.base}: {r.stderr.strip()}",
                           r.returncode, ["loom", "fs", *argv], r.stdout)

    def put(self, local: str, name: str) -> int:
        """Stores local as name; the bytes written (0 when another client
        stored it first)."""
        size = os.path.getsize(local)
        if not self.remote:
            os.makedirs(self.base, exist_ok=True)
            part = os.path.join(self.base, f".{name}.{os.getpid()}.part")
            shutil.copyfile(local, part)
            os.replace(part, self.url(name))
            return size
        for args in (("mkdir", self.base), ("put", local, self.url(name))):
            r = _loom_fs(self.e, *args)
            if r.returncode and not (args[0] == "put" and self.has(name)):
                raise BackendError(f"cannot store {local} in the cache {self.base}: "
                                   f"{r.stderr.strip()}", r.returncode or 3,
                                   ["loom", "fs", *args], r.stdout)
            if r.returncode:
                return 0  # another client's copy is there
        return size


def _cached(cache: Cache, name: str, what: str, pack: Any, tmp: str) -> Dict[str, Any]:
    """The cached archive name, packed by pack(path) and stored unless the
    cache has it: a record of what was done."""
    t0 = time.monotonic()
    rec: Dict[str, Any] = {"what": what, "url": cache.url(name), "sha256": name.split("-")[-1]
                           .split(".")[0], "uploaded": 0, "packed": False}
    if not cache.has(name):
        local = os.path.join(tmp, name)
        pack(local)
        rec["packed"] = True
        rec["bytes"] = os.path.getsize(local)
        rec["uploaded"] = cache.put(local, name)
        os.unlink(local)
    rec["seconds"] = round(time.monotonic() - t0, 3)
    return rec


# ---- python= --------------------------------------------------------------

def ship(python: PythonLike, backend: str, e: Mapping[str, str], tmp: str,
         caller_dir: Optional[str]) -> Shipment:
    """The archives, interpreters and environment of a loom.run(fn) job
    whose tasks run off the caller's host (or from an environment
    archive). Raises PackError, BackendError, NotFound before anything
    starts."""
    out = Shipment()
    cache = Cache(backend, e)
    values: Dict[Optional[str], Any] = {}
    if isinstance(python, Mapping):
        for k, v in python.items():
            values[k] = v
    else:
        values[None] = python
    if not values:
        raise ValueError("loom.run(fn): python= is an empty dict (give {label: environment})")
    sites: List[str] = []
    mm = "python{}.{}".format(*sys.version_info[:2])
    done: Dict[str, str] = {}  # value: interpreter
    for label, v in values.items():
        if v is not None and not isinstance(v, str):
            raise TypeError(f"loom.run(fn): python= for {label!r} must be a string, got "
                            f"{type(v).__name__}")
        if v in done:
            out.interpreter[label] = done[v]
            continue
        if v == "auto":
            if backend == "local":
                interp = sys.executable  # its environment is here
            else:
                kind, prefix = active_env()
                if kind == "conda":
                    raise PackError(f"python='auto': {prefix} is a conda environment, which "
                                    "loom does not pack itself: pack it with conda-pack (conda "
                                    "pack -p PREFIX -o env.tar.gz) and give python='env.tar.gz'")
                dirs = site_dirs()
                name = f"env-{env_digest(dirs)}.tgz"
                out.shipped.append(_cached(cache, name, "environment",
                                           lambda p, d=dirs: _tar(p, d), tmp))
                out.archives[ENV] = out.shipped[-1]["url"]
                sites.append(ENV)
                interp = mm
        elif isinstance(v, str) and is_archive(v):
            target = ENV if len(values) == 1 else f"{ENV}-{len(out.archives)}"
            if "://" not in v and not os.path.isfile(v):
                raise NotFound(f"loom.run(fn): python={v!r}: no such archive", [v])
            out.archives[target] = v if "://" in v else os.path.abspath(v)
            out.shipped.append({"what": "environment", "url": out.archives[target],
                                "uploaded": None, "packed": False})
            interp = f"{target}/bin/python"
        elif v:
            interp = v  # an interpreter the nodes have
        else:
            interp = "python3" if backend != "local" else sys.executable
        done[v] = interp
        out.interpreter[label] = interp
    if backend != "local":
        own = os.path.join(tmp, OWN)
        # the tree is copied and hashed once per process while its sources
        # are unchanged (a notebook's every run would copy it again)
        key = own_key(caller_dir, sites)
        digest = _OWN_DIGESTS.get(key)
        if digest is None:
            own_tree(own, caller_dir, sites)
            digest = _OWN_DIGESTS[key] = tree_digest(own)

        def pack(p: str) -> None:
            if not os.path.isdir(own):
                own_tree(own, caller_dir, sites)
            _tar(p, [own])
        name = f"py-{digest}.tgz"
        out.shipped.append(_cached(cache, name, "modules", pack, tmp))
        out.archives[OWN] = out.shipped[-1]["url"]
        out.env["PYTHONPATH"] = OWN
        # the caller's own (a build tree's, hidden on a node) must not reach
        # the tasks: loom._find finds loom-py's copy
        out.env["LOOM_LIBRARY"] = ""
        out.env["LOOM_LIB"] = ""
        out.env["LOOM_BIN"] = ""
    return out


def say(rec: Dict[str, Any]) -> str:
    """One line on what a shipment did, for the caller's stderr."""
    what = ("the tasks' Python environment" if rec["what"] == "environment"
            else "loom and the caller's modules")
    if rec.get("uploaded") is None:
        return f"loom: {what}: {rec['url']} (as given)"
    if not rec["packed"]:
        return f"loom: {what}: {rec['url']} (cached already, {rec['seconds']} s)"
    return (f"loom: {what}: {rec['url']} (packed {rec['bytes'] / 1e6:.1f} MB, "
            f"{'uploaded' if rec['uploaded'] else 'stored by another client'}, "
            f"{rec['seconds']} s)")


def caller_dir() -> Optional[str]:
    """The directory of the calling script (sys.path[0]; the current
    directory for python -c, a notebook or the REPL)."""
    first = sys.path[0] if sys.path else ""
    d = os.path.abspath(first or os.getcwd())
    return d if os.path.isdir(d) else None

