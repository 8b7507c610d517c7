"""A job spec as Python objects, written out as JSON (which is YAML) for
the `loom` binary, so the C spec parser checks it by its own rules and
reports errors by file:line:column of that text (see Spec.to_json()).

    spec = loom.Spec(name="hello", roles={
        "worker": loom.Role(instances=2, vcores=2, memory="2GiB",
                            command=["python3", "train.py"]),
        "ps": loom.Role(command="sleep 3600"),
    }, env={"OMP_NUM_THREADS": "1"})

Every key of the spec (README, "The spec") is a field; None leaves it out
(loom's default). `extra` adds keys verbatim (for keys newer than this
package, or to see loom's error for a wrong one); roles may also be plain
dicts and the whole spec a dict."""
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

Command = Union[str, List[str]]


def _clean(obj: Any) -> Dict[str, Any]:
    """The dataclass's fields that are set (not None), extra merged in."""
    out: Dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.name == "extra" or v is None:
            continue
        out[f.name] = v
    out.update(getattr(obj, "extra") or {})
    return out


@dataclass
class Role:
    """One role of a job: `roles.R.*` of the spec."""

    command: Optional[Command] = None  # a string (run by /bin/sh -c) or a list (exec'd)
    instances: Optional[int] = None    # tasks of the role (default 1)
    procs: Optional[int] = None        # processes per task (default 1)
    vcores: Optional[int] = None       # cores per task (CPU affinity)
    memory: Optional[str] = None       # "512MiB", "2GiB": an enforced limit
    gpus: Optional[int] = None         # GPUs per task (CUDA_VISIBLE_DEVICES)
    env: Optional[Dict[str, str]] = None
    service: Optional[bool] = None     # the job does not wait for it
    label: Optional[str] = None        # Slurm node constraint / YARN node label
    restart: Optional[str] = None      # "job" or "task", over the job's policy
    elastic: Optional[Dict[str, int]] = None  # {"min": 2, "max": 4}
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        """The role as the spec's mapping (unset fields left out)."""
        return _clean(self)


@dataclass
class Spec:
    """A job spec: the keys of README's "The spec". name and roles are
    required by loom (it says so if they are missing)."""

    name: Optional[str] = None
    roles: Dict[str, Union[Role, Mapping[str, Any]]] = field(default_factory=dict)
    backend: Optional[str] = None      # local (default), slurm, yarn, external
    retries: Optional[int] = None
    env: Optional[Dict[str, str]] = None
    files: Optional[Dict[str, str]] = None     # target: source (relative to the cwd)
    archives: Optional[Dict[str, str]] = None  # target: .tar.gz/.tgz/.tar/.zip source
    queue: Optional[str] = None
    restart: Optional[str] = None
    max_restarts: Optional[int] = None
    retry_on: Optional[List[int]] = None
    heartbeat_timeout: Optional[str] = None    # "30s"
    feed: Optional[Dict[str, Any]] = None      # the data feed (README, "The data feed")
    python: Optional[str] = None               # an environment archive: loom-env/bin on PATH
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self, base: Optional[str] = None) -> Dict[str, Any]:
        """The spec as plain data. Local `files` and `archives` sources are
        made absolute against base (default: the current directory), since
        loom reads them relative to the spec file's directory."""
        d = _clean(self)
        d["roles"] = {k: (r.to_dict() if isinstance(r, Role) else dict(r))
                      for k, r in self.roles.items()}
        base = base or os.getcwd()
        for key in ("files", "archives"):
            if isinstance(d.get(key), dict):
                d[key] = {t: _absolute(s, base) for t, s in d[key].items()}
        if isinstance(d.get("python"), str) and d["python"] != "auto":
            d["python"] = _absolute(d["python"], base)
        return d

    def to_json(self, base: Optional[str] = None) -> str:
        """The text loom is given: JSON (which is YAML), a key a line, so
        the line:column of an error points into this text."""
        return json.dumps(self.to_dict(base), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Spec":
        """A Spec from plain data (a parsed YAML or JSON spec); keys that are
        not fields go to extra, so loom judges them."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        return cls(**known, extra={k: v for k, v in d.items() if k not in names})


def _absolute(src: Any, base: str) -> Any:
    if not isinstance(src, str) or "://" in src or os.path.isabs(src):
        return src
    return os.path.join(base, src)
