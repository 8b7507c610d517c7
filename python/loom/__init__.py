"""loom from Python: run and follow jobs as the command line does, and,
inside a task, talk to the job through libloom (ctypes; no compiled
extension; cloudpickle, for loom.run(fn), its one dependency).

    import loom
    spec = loom.Spec(name="hello", roles={
        "worker": loom.Role(instances=2, command=["python3", "train.py"])})
    r = loom.run(spec)              # or a YAML path; r.ok, r.state, r.stdout
    job = loom.submit("job.yaml")   # detached: the job id
    loom.status(job)["state"]; loom.logs(job, "worker:1"); loom.events(job)
    loom.kill(job)
    r = loom.run(train, args=(lr,), num_workers=2)   # a function in every task
    r.values                        # {"worker:0": ..., "worker:1": ...}; TaskError if one raised

Inside a task:

    t = loom.task()                 # role, index, rank, world_size, cluster...
    l = loom.Loom()                 # from the task's environment (LOOM_*)
    l.kv_set("k", b"v"); l.metric("loss", step, 0.42)
    with loom.Feed(l) as feed:      # the job's data feed (the spec's feed:)
        for rec in feed:            # bytes, every record of every epoch
            feed.write(predict(rec) + b"\\n")   # inference output, exactly once
    l.close()

Errors are LoomError subclasses carrying loom's message (SpecError for a
bad spec, with loom's file:line:column). The binary and libloom are found
as loom._find says (LOOM_BIN, LOOM_LIBRARY, a build, an install prefix);
NotFound says where it looked. Loom and Feed load libloom on first use.
See loom.feed for batches, numpy arrays and epochs."""
import os
from typing import Any

from .cli import JobFailed, Result, events, kill, logs, run, status, submit
from .errors import (BackendError, CommandError, FsError, JobTimeout, LoomError, NotFound,
                     NotInTask, NotPicklable, PackError, SpecError, TaskError, TrackingError)
from .spec import Role, Spec
from .task import Task, task
from ._find import binary, library


def _version() -> str:
    """loom's version: the installed package's (written by setup.py), or,
    run from the source tree, its file VERSION (python/VERSION)."""
    try:
        from ._install import VERSION
        return str(VERSION)
    except ImportError:
        pass
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "VERSION")
    try:
        with open(here) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


__version__ = _version()

__all__ = ["Loom", "Feed", "LoomError", "END", "EPOCH", "run", "submit", "status", "logs",
           "events", "kill", "Result", "Spec", "Role", "task", "Task", "CommandError",
           "SpecError", "BackendError", "JobTimeout", "JobFailed", "NotFound", "NotInTask",
           "TaskError", "NotPicklable", "PackError", "TrackingError", "FsError", "binary",
           "library"]

_LAZY = {"Loom": "core", "Feed": "feed", "END": "feed", "EPOCH": "feed"}


def __getattr__(name: str) -> Any:
    """Loom, Feed, END and EPOCH load libloom when first used (NotFound,
    an ImportError too, when it cannot be found)."""
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'loom' has no attribute {name!r}")
    import importlib
    v = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = v
    return v
