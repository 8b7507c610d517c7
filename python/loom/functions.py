"""loom.run(fn, ...): run a Python function in every task of a job and get
each task's return value back.

    r = loom.run(train, args=(data_dir,), num_workers=2)
    r.values    # {"worker:0": ..., "worker:1": ...}

The caller pickles (fn, args, kwargs) with cloudpickle (by value for a
function of __main__, a notebook cell, a lambda or a closure) into a file
that the generated spec's `files` ships to every task: the local backend
links it into each task's working directory, YARN stages it and localizes
it into each container, so no filesystem needs to be shared with the
caller. Each task runs `python -m loom._fn loom-fn.pkl`, which sends its
return value (or its exception and traceback) back as events through the
coordinator's connection; `loom run` keeps the coordinator beside the
caller, so the caller reads them from the job's event log once the job
has ended. See docs/python.md, "Functions"."""
import dataclasses
import os
import pickle
import re
import sys
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import pyenv
from .errors import NotFound, NotPicklable, TaskError
from .spec import Role, Spec

FILE = "loom-fn.pkl"  # the pickle's name in each task's working directory


def _cloudpickle() -> Any:
    """cloudpickle, else the copy pyspark carries (pyspark.cloudpickle: a
    Spark driver and its executors have it)."""
    try:
        import cloudpickle
    except ImportError as e:
        try:
            from pyspark import cloudpickle
            return cloudpickle
        except ImportError:
            pass
        raise NotFound("loom.run(fn) ships the function with cloudpickle, which this Python "
                       f"({sys.executable}) cannot import ({e}): install it (Debian: apt-get "
                       "install python3-cloudpickle; pip install cloudpickle)") from None
    return cloudpickle


def _what(v: Any) -> str:
    t = type(v)
    return f"a {t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else f"a {t.__name__}"


def _culprit(cp: Any, fn: Callable[..., Any], args: Sequence[Any],
             kwargs: Mapping[str, Any]) -> Tuple[str, Optional[BaseException]]:
    """Which part of (fn, args, kwargs) cannot be pickled: its name and the
    error pickling it alone gave."""
    def bad(v: Any) -> Optional[BaseException]:
        try:
            cp.dumps(v)
            return None
        except Exception as e:  # pickling raises TypeError, PicklingError, AttributeError...
            return e

    for i, a in enumerate(args):
        e = bad(a)
        if e:
            return f"args[{i}] ({_what(a)})", e
    for k, a in kwargs.items():
        e = bad(a)
        if e:
            return f"kwargs[{k!r}] ({_what(a)})", e
    name = getattr(fn, "__qualname__", None) or repr(fn)
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = getattr(fn, "__closure__", None) or ()
        for var, cell in zip(code.co_freevars, cells):
            try:
                v = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            e = bad(v)
            if e:
                return f"{var} ({_what(v)}), a variable that function {name} closes over", e
        g = getattr(fn, "__globals__", {})
        for var in _global_names(code):
            if var in g:
                e = bad(g[var])
                if e:
                    return f"{var} ({_what(g[var])}), a global that function {name} uses", e
        for i, d in enumerate(getattr(fn, "__defaults__", None) or ()):
            e = bad(d)
            if e:
                return f"a default argument of function {name} ({_what(d)})", e
    return f"function {name}", bad(fn)


def _global_names(code: Any) -> List[str]:
    """The global names a code object and the code nested in it use."""
    out = list(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            out += _global_names(c)
    return list(dict.fromkeys(out))


def dumps(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """(fn, args, kwargs) pickled, or NotPicklable naming what could not be."""
    cp = _cloudpickle()
    try:
        return bytes(cp.dumps((fn, tuple(args), dict(kwargs))))
    except Exception as e:
        what, err = _culprit(cp, fn, args, kwargs)
        err = err or e
        raise NotPicklable(f"loom.run: cannot pickle {what} to ship it to the tasks: "
                           f"{type(err).__name__}: {err}", what) from e


def roles_of(roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]],
             num_workers: Optional[int]) -> Dict[str, Role]:
    """The job's roles: roles= (Roles or dicts without a command), or
    num_workers=N as {"worker": Role(instances=N)}; one worker by default."""
    if roles is not None and num_workers is not None:
        raise ValueError("loom.run(fn): give roles= or num_workers=, not both")
    if roles is None:
        return {"worker": Role(instances=1 if num_workers is None else num_workers)}
    out: Dict[str, Role] = {}
    for name, r in roles.items():
        role = dataclasses.replace(r) if isinstance(r, Role) else Role(**{k: v for k, v in r.items()
                                                     if k != "extra"},
                                                  extra=dict(r.get("extra") or {}))
        if role.command is not None or "command" in role.extra:
            raise ValueError(f"loom.run(fn): role {name!r} has a command; with a function every "
                             "task runs the function (leave command out)")
        out[name] = role
    if not out:
        raise ValueError("loom.run(fn): roles is empty")
    return out


def job_name(fn: Callable[..., Any]) -> str:
    """A spec name ([a-z0-9][a-z0-9_-]{0,62}) from the function's name."""
    n = re.sub(r"[^a-z0-9_-]+", "-", str(getattr(fn, "__name__", "fn")).lower()).strip("-_")
    return (n or "fn")[:63]


def task_python(backend: Optional[str], python: Optional[str]) -> str:
    """The interpreter the tasks run: python=, else the caller's own
    (sys.executable) on the local backend, else python3 on the task's PATH."""
    if python:
        return python
    if backend in (None, "local"):
        return sys.executable
    return "python3"


def python_path(env: Optional[Mapping[str, str]]) -> str:
    """PYTHONPATH for the tasks: the directory this loom package is in and
    the caller's script directory (or the current directory) first, then
    the caller's PYTHONPATH (env's, else os.environ's)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    first = sys.path[0] if sys.path and sys.path[0] else os.getcwd()
    rest = (env or {}).get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    out = [pkg, os.path.abspath(first)] + [p for p in rest.split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(out))


def build(fn: Callable[..., Any], tmp: str, *, args: Sequence[Any],
          kwargs: Optional[Mapping[str, Any]],
          roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]],
          num_workers: Optional[int], backend: Optional[str], python: pyenv.PythonLike,
          files: Optional[Mapping[str, str]], env: Optional[Mapping[str, str]],
          queue: Optional[str], retries: Optional[int], name: Optional[str],
          python_env: Optional[Mapping[str, str]] = None,
          shipped: Optional[List[Dict[str, Any]]] = None) -> Spec:
    """The job that runs fn in every task, with its pickle written into tmp.
    Off the local backend (Spark's executors have their Python) and for an
    environment archive, python= and the caller's modules are shipped
    (loom.pyenv, with python_env the environment loom runs in; what was
    shipped is appended to shipped). Raises NotPicklable, ValueError,
    NotFound, PackError before anything starts."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(f"loom.run(fn): args must be a tuple or list, got {type(args).__name__}")
    rs = roles_of(roles, num_workers)
    data = dumps(fn, args, kwargs or {})
    pkl = os.path.join(tmp, FILE)
    with open(pkl, "wb") as f:
        # a header the task reads first (plain pickle): the caller's Python
        # version, which cloudpickle's by-value code needs on both sides
        pickle.dump({"python": list(sys.version_info[:2]), "caller": sys.executable}, f,
                    protocol=2)
        f.write(data)
    fs = dict(files or {})
    if FILE in fs:
        raise ValueError(f"loom.run(fn): files may not name {FILE}: loom.run ships the function "
                         "under that name")
    fs[FILE] = pkl
    e = dict(env or {})
    where = backend or "local"
    archives: Optional[Dict[str, str]] = None
    if where != "spark" and (isinstance(python, Mapping) or python == "auto"
                             or pyenv.wants_shipping(where, python)):
        from .cli import _env
        sh = pyenv.ship(python, where, python_env or _env(None, env), tmp, pyenv.caller_dir())
        for r in rs.values():
            r.command = [sh.python_for(r.label), "-m", "loom._fn", FILE]
        archives = sh.archives or None
        if where == "local":  # the tasks see the caller's files
            e["PYTHONPATH"] = python_path(env)
        for k, v in sh.env.items():
            if k == "PYTHONPATH" and e.get(k):
                v = v + os.pathsep + e[k]
            e[k] = v
        for rec in sh.shipped:
            sys.stderr.write(pyenv.say(rec) + "\n")
        if shipped is not None:
            shipped.extend(sh.shipped)
    else:
        if python is not None and not isinstance(python, str):
            raise TypeError("loom.run(fn): python= must be a string or a dict by node label")
        cmd = [task_python(backend, python), "-m", "loom._fn", FILE]
        for r in rs.values():
            r.command = cmd
        e["PYTHONPATH"] = python_path(env)
    return Spec(name=name or job_name(fn), roles=dict(rs), backend=backend, retries=retries,
                env=e, files=fs, archives=archives, queue=queue)


def collect(events: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """From the job's events: the last attempt's values by key and its
    first error event (or None)."""
    mine = [e for e in events if e.get("event") in ("loom_fn_result", "loom_fn_error")
            and e.get("source", "user") == "user"]
    if not mine:
        return {}, None
    last = max(int(e.get("attempt") or 0) for e in mine)
    mine = [e for e in mine if int(e.get("attempt") or 0) == last]
    err = next((e for e in mine if e["event"] == "loom_fn_error"), None)
    parts: Dict[str, Dict[int, str]] = {}
    count: Dict[str, int] = {}
    for e in mine:
        if e["event"] == "loom_fn_result":
            parts.setdefault(e["key"], {})[int(e["part"])] = e["data"]
            count[e["key"]] = int(e["parts"])
    import base64
    cp = _cloudpickle()
    values: Dict[str, Any] = {}
    for k, ps in parts.items():
        if len(ps) != count[k]:
            continue  # the task was stopped part way through sending
        values[k] = cp.loads(b"".join(base64.b64decode(ps[i]) for i in range(count[k])))
    return values, err


def task_error(err: Dict[str, Any], job_id: str) -> TaskError:
    """The TaskError for a loom_fn_error event."""
    task = str(err.get("key") or err.get("task") or "?")
    tb = str(err.get("traceback") or "")
    module = err.get("module")
    stage = err.get("stage")
    if stage == "load":
        if module:
            msg = (f"{task}: the function could not be loaded: module {module!r} is not "
                   f"installed for the task's Python ({err.get('python')})")
        else:
            msg = (f"{task}: the function could not be loaded: {err.get('type')}: "
                   f"{err.get('message')}")
    elif stage == "result":
        msg = (f"{task}: its return value could not be pickled: {err.get('type')}: "
               f"{err.get('message')}")
    else:
        msg = f"{task} raised {err.get('type')}: {err.get('message')}"
    return TaskError(msg, task, tb, module=module if isinstance(module, str) else None,
                     job_id=job_id, remote_type=str(err.get("type") or ""))


def make_tmp() -> "tempfile.TemporaryDirectory[str]":
    return tempfile.TemporaryDirectory(prefix="loom-fn-")
