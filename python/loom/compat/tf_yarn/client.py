"""tf-yarn's client side on loom: run_on_yarn's arguments as a loom job,
RunFailed, Metrics, get_safe_experiment_fn."""
import datetime
import importlib
import re
import sys
import time
from typing import Any, Callable, Dict, NamedTuple, Optional, Union

from ...spec import Role
from .topologies import ALL_TASK_TYPES, NodeLabel, TaskSpec


class RunFailed(Exception):
    """run_on_yarn failed: a task raised (the message has its name and
    traceback; __cause__ is loom's TaskError) or the job failed."""


class Metrics(NamedTuple):
    """What run_on_yarn returns: the job's wall time from the call to the
    end; each task's time in its container and in training (main_fn), as
    the task measured them."""
    total_training_duration: Optional[datetime.timedelta]
    total_eval_duration: Optional[datetime.timedelta]
    container_duration: Dict[str, Optional[datetime.timedelta]]
    train_eval_time_per_node: Dict[str, Optional[datetime.timedelta]]


def get_safe_experiment_fn(full_fn_name: str, *args: Any) -> Callable[[], Any]:
    """An experiment_fn that imports "module.function" in the task and
    calls it with args: nothing of the caller's is pickled but the name
    (tf-yarn's answer to experiment functions that do not pickle)."""
    def _safe_experiment_fn() -> Any:
        module_name, fn_name = full_fn_name.rsplit(".", 1)
        return getattr(importlib.import_module(module_name), fn_name)(*args)
    return _safe_experiment_fn


def _refuse(name: str, why: str) -> Exception:
    return ValueError(f"run_on_yarn: {name}: {why}")


def roles_of(task_specs: Dict[str, TaskSpec]) -> Dict[str, Role]:
    bad = set(task_specs) - ALL_TASK_TYPES
    if bad:
        raise _refuse("task_specs", f"{sorted(bad)}: task types are {sorted(ALL_TASK_TYPES)}")
    roles = {}
    for name, s in task_specs.items():
        if not isinstance(s, TaskSpec):
            raise _refuse("task_specs", f"{name!r} is a {type(s).__name__}, not a TaskSpec")
        if s.instances < 1:
            continue
        roles[name] = Role(instances=s.instances, memory=f"{s.memory}MiB", vcores=s.vcores,
                           label=s.label.value or None)
    if not roles:
        raise _refuse("task_specs", "no task has instances")
    return roles


def python_of(pyenv_zip_path: Union[None, str, Dict[NodeLabel, str]]) -> Any:
    """loom.run's python=: the archive (or one per label), or, as tf-yarn
    packs the active environment when none is given, "auto" inside a
    virtualenv (outside one the nodes' python3 runs the tasks)."""
    if pyenv_zip_path is None:
        return "auto" if sys.prefix != sys.base_prefix else None
    if isinstance(pyenv_zip_path, dict):
        return {("gpu" if k == NodeLabel.GPU else "cpu"): v for k, v in pyenv_zip_path.items()}
    return pyenv_zip_path


def run(task: Callable[..., Any], experiment_fn: Callable[[], Any],
        task_specs: Dict[str, TaskSpec], *, pyenv_zip_path: Any, files: Optional[Dict[str, str]],
        env: Optional[Dict[str, str]], queue: str, nb_retries: int, name: str,
        custom_task_module: Optional[str], backend: str,
        refused: Dict[str, Any]) -> Metrics:
    """run_on_yarn: task(experiment_fn, custom_task_module) in every task
    of a loom job on YARN."""
    import loom
    for k, v in refused.items():
        if v is not None:
            raise _refuse(k, "not honoured by loom.compat (docs/python.md says why and what "
                          "to use)")
    job = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:63] or "runonyarn"
    t0 = time.monotonic()
    try:
        r = loom.run(task, args=(experiment_fn, custom_task_module),
                     roles=roles_of(task_specs), backend=backend,
                     python=python_of(pyenv_zip_path), files=files, env=env, queue=queue,
                     retries=nb_retries, name=job, echo=True)
    except loom.TaskError as e:
        raise RunFailed(f"{e.message}\n{e.traceback}") from e
    except loom.LoomError as e:
        raise RunFailed(str(e)) from e
    if not r.ok:
        raise RunFailed(f"the job {r.job_id} ended {r.state}: {r.stderr.strip()[-2000:]}")
    took = datetime.timedelta(seconds=time.monotonic() - t0)
    def td(v: Any, k: str) -> Optional[datetime.timedelta]:
        s = v.get(k) if isinstance(v, dict) else None
        return None if s is None else datetime.timedelta(seconds=s)
    return Metrics(total_training_duration=took, total_eval_duration=None,
                   container_duration={t: td(v, "container_s") for t, v in r.values.items()},
                   train_eval_time_per_node={t: td(v, "train_s") for t, v in r.values.items()})
