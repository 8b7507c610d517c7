"""MLflow tracking for loom.run: one MLflow run per loom job.

When the module mlflow is importable and MLFLOW_TRACKING_URI is set (or
run(mlflow=...) asks for it), loom.run opens an MLflow run before the job
starts and hands it to every task (MLFLOW_RUN_ID, MLFLOW_TRACKING_URI,
MLFLOW_EXPERIMENT_ID in the job's environment: mlflow.start_run() in a
task continues it). While the job runs, a thread reads the job's
events (`loom events --follow`) and logs each loom metric with its step
and time; when the job ends, the spec, the events, the status and every
task's log are logged as artifacts under loom/, and the run ends
FINISHED, FAILED or KILLED as the job did. docs/python.md, "MLflow", is the reference.

Metric keys: TAG/ROLE-INDEX for what a task reports (loom_metric,
Loom.metric; loom/time_*_pct are libloom's), system/TAG/ROLE-INDEX for
what its agent measures (cpu_percent, rss_mb...). Params: the resolved
spec, flattened (roles.worker.instances, files.NAME...; environment
values are left out, they may hold secrets), and a function's arguments
(args.0, kwargs.NAME, as repr). Tags: loom.job, loom.backend, loom.state,
loom.exit_code."""
import json
import math
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .errors import LoomError, TrackingError

POLL_S = 1.0           # how often the job's new events are logged
PARAM_MAX = 500        # a param's value, cut (MLflow before 2.x takes 500)
PARAMS_PER_BATCH = 100  # MLflow's limits on one log_batch
METRICS_PER_BATCH = 1000
TASK_ENV = ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_ID")

MlflowArg = Union[None, bool, str]


def wanted(arg: MlflowArg, env: Mapping[str, str]) -> Optional[str]:
    """The tracking URI to log to, or None for no tracking: mlflow=False
    never, a string is the URI, True or None take MLFLOW_TRACKING_URI (None
    only when it is set and mlflow importable; True else mlflow's default
    URI). Raises TrackingError when asked for and mlflow is missing."""
    if arg is False:
        return None
    if arg is not None and arg is not True and not isinstance(arg, str):
        raise TypeError(f"loom.run: mlflow= must be None, a bool or a tracking URI, "
                        f"got {type(arg).__name__}")
    uri = arg if isinstance(arg, str) else env.get("MLFLOW_TRACKING_URI", "")
    if arg is None and not uri:
        return None
    try:
        import mlflow
    except ImportError as ex:
        if arg is None:
            return None
        raise TrackingError(f"loom.run(mlflow=...): cannot import mlflow in {sys.executable} "
                            f"({ex}); pip install mlflow, or leave mlflow= out") from None
    return uri or str(mlflow.get_tracking_uri())


def _probe(uri: str) -> None:
    """A tracking server that does not answer is said now, in one line,
    rather than after MLflow's retries (minutes)."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10) as r:
            r.read(256)
    except urllib.error.HTTPError:
        return  # it answers (behind a proxy or a login /health may be refused)
    except (OSError, ValueError) as ex:
        why = getattr(ex, "reason", ex)
        raise TrackingError(f"the MLflow tracking server {uri} cannot be reached ({why}); "
                            "nothing was started") from None


def _one_line(ex: BaseException) -> str:
    s = str(ex).strip().splitlines()
    return s[0][:300] if s else type(ex).__name__


def _cut(v: str) -> str:
    return v if len(v) <= PARAM_MAX else v[:PARAM_MAX - 3] + "..."


def _name(s: str) -> str:
    """A key MLflow takes: letters, digits, _ - . space and /, no empty or
    dot-only path parts."""
    s = re.sub(r"[^/\w.\- ]", "_", s)
    parts = [p if p.strip(".") else "_" for p in s.split("/")]
    return "/".join(p or "_" for p in parts)


def _flatten(v: Any, key: str, out: Dict[str, str]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            if k == "env":
                continue  # values may be secrets
            _flatten(x, f"{key}.{k}" if key else str(k), out)
    elif key:
        out[_name(key)] = _cut(v if isinstance(v, str) else json.dumps(v))


def spec_params(spec: Mapping[str, Any]) -> Dict[str, str]:
    """The resolved spec (the job directory's spec.yaml) as params."""
    out: Dict[str, str] = {}
    _flatten(dict(spec), "", out)
    return out


def arg_params(args: Sequence[Any], kwargs: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """A function's arguments as params, each its repr."""
    out = {f"args.{i}": _cut(repr(a)) for i, a in enumerate(args)}
    out.update({_name(f"kwargs.{k}"): _cut(repr(v)) for k, v in (kwargs or {}).items()})
    return out


def metric_key(ev: Mapping[str, Any]) -> str:
    task = str(ev.get("task") or "job").replace(":", "-")
    key = f"{ev['tag']}/{task}"
    return _name("system/" + key if ev.get("source") == "agent" else key)


class Tracking:
    """One MLflow run for one loom job (see the module's docstring). What
    it reads of the job comes through the loom command, as for loom.cli:
    `loom events JOB --json --follow`, `loom status JOB --json --spec`,
    `loom logs JOB [--task T]`."""

    def __init__(self, uri: str, name: str, env: Mapping[str, str],
                 params: Mapping[str, str]) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient
        _probe(uri)
        self.uri, self.name, self.env = uri, name, dict(env)
        self.client = MlflowClient(tracking_uri=uri)
        self.job: Optional[str] = None
        self.events: List[bytes] = []   # every event line, for the artifact
        self.spec: Dict[str, Any] = {}
        self.spec_logged = False
        self.warned = False
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.thread: Optional[threading.Thread] = None
        t = {"mlflow.source.name": "loom"}
        active = mlflow.active_run()
        try:
            if active is not None and str(mlflow.get_tracking_uri()) == uri:
                # inside the caller's `with mlflow.start_run():` a nested run
                eid = active.info.experiment_id
                t["mlflow.parentRunId"] = active.info.run_id
            else:
                eid = self._experiment(env)
            run = self.client.create_run(eid, tags=t, run_name=name)
        except Exception as ex:  # MlflowException, requests' errors: MLflow's own words
            raise TrackingError(f"MLflow at {uri} refused to open a run: {_one_line(ex)}; "
                                "nothing was started") from None
        self.run_id: str = run.info.run_id
        self.experiment_id: str = str(eid)
        self._params(params)

    def _experiment(self, env: Mapping[str, str]) -> str:
        eid = env.get("MLFLOW_EXPERIMENT_ID")
        name = env.get("MLFLOW_EXPERIMENT_NAME")
        if eid:
            return eid
        if name:
            e = self.client.get_experiment_by_name(name)
            return str(e.experiment_id) if e is not None else str(
                self.client.create_experiment(name))
        return "0"  # MLflow's Default experiment

    def task_env(self) -> Dict[str, str]:
        """What every task gets so that mlflow in it logs to this run."""
        return dict(zip(TASK_ENV, (self.run_id, self.uri, self.experiment_id)))

    def _warn(self, what: str, ex: BaseException) -> None:
        if not self.warned:
            self.warned = True
            sys.stderr.write(f"loom: MLflow run {self.run_id} at {self.uri}: cannot {what}: "
                             f"{_one_line(ex)} (the job goes on)\n")

    def _loom(self, *args: str) -> Optional[str]:
        """loom ARGS' stdout, None when it failed."""
        from .cli import _loom
        try:
            return _loom(args, env=self.env, timeout=60)
        except (LoomError, OSError, subprocess.SubprocessError):
            return None

    def _batches(self, kind: str, items: List[Any], size: int) -> None:
        """items (MLflow Params or Metrics) logged size at a time; the
        first failure is said once and ends it."""
        for i in range(0, len(items), size):
            try:
                self.client.log_batch(self.run_id, **{kind: items[i:i + size]})
            except Exception as ex:
                self._warn(f"log {kind}", ex)
                return

    def _params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param
        self._batches("params", [Param(k, v) for k, v in params.items()], PARAMS_PER_BATCH)

    def on_line(self, line: str) -> None:
        """loom run's stderr, line by line: its first names the job."""
        if self.job is None and line.startswith("loom: job ") and len(line.split()) == 3:
            self.job = line.split()[2]
            try:
                self.client.set_tag(self.run_id, "loom.job", self.job)
            except Exception as ex:
                self._warn("set the tag loom.job", ex)
            from ._find import binary
            try:  # nothing may raise here: this is loom run's stderr pump
                self.proc = subprocess.Popen([binary(), "events", self.job, "--json", "--follow"],
                                             env=self.env, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            except (LoomError, OSError) as ex:
                self._warn("follow the job's events (they are logged at its end)", ex)
                return
            self.thread = threading.Thread(target=self._follow, name="loom-mlflow", daemon=True)
            self.thread.start()

    def _follow(self) -> None:
        """The job's events as they come: metrics logged at most POLL_S
        late, in batches; the spec as params once the job's state is there."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        rest, last = b"", time.monotonic()
        pending: List[Any] = []
        while True:
            ready, _, _ = select.select([fd], [], [], POLL_S)
            chunk = os.read(fd, 1 << 16) if ready else None
            if chunk == b"":
                break
            if chunk:
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                self.events.extend(line + b"\n" for line in lines if line)
                pending.extend(m for m in map(_metric, lines) if m is not None)
            if not self.spec_logged:
                self._spec()
            if pending and (len(pending) >= METRICS_PER_BATCH or
                            time.monotonic() - last >= POLL_S):
                self._metrics(pending)
                pending, last = [], time.monotonic()
        self._metrics(pending)
        self.proc.wait()

    def _spec(self) -> None:
        """The spec as the job runs it: params, the run's name, loom.backend."""
        out = self._loom("status", str(self.job), "--json", "--spec")
        try:
            spec = json.loads(out)["spec"] if out else None
        except (ValueError, KeyError, TypeError):
            spec = None
        if not isinstance(spec, dict):
            return  # no state yet: the coordinator is starting
        self.spec_logged = True
        self.spec = spec
        self._params(spec_params(spec))
        try:
            self.client.set_tag(self.run_id, "loom.backend", str(spec.get("backend", "local")))
            if spec.get("name") and spec["name"] != self.name:
                # a spec file's own name (or --set name=): the job's
                self.client.update_run(self.run_id, name=str(spec["name"]))
        except Exception as ex:
            self._warn("set the job's backend and name", ex)

    def _metrics(self, ms: List[Any]) -> None:
        self._batches("metrics", ms, METRICS_PER_BATCH)

    def _missed(self) -> None:
        """The event log once more, whole: the lines the follower did not
        see (it never started, or was killed, or the log was published
        after it ended) are kept and their metrics logged."""
        out = self._loom("events", str(self.job), "--json")
        if out is None:
            return
        lines = [line.encode() + b"\n" for line in out.splitlines() if line]
        seen = set(self.events)
        new = [line for line in lines if line not in seen]
        if not new:
            return
        self.events = lines
        self._metrics([m for m in map(_metric, new) if m is not None])

    def _files(self, d: Path) -> None:
        """The job's files into d: events.jsonl, spec.json and status.json
        (environment values and the dashboard's token left out), logs/."""
        (d / "events.jsonl").write_bytes(b"".join(self.events))
        if self.spec_logged:
            (d / "spec.json").write_text(json.dumps(_no_env(self.spec), indent=2) + "\n")
        out = self._loom("status", str(self.job), "--json")
        st = json.loads(out) if out else {}
        if st:
            st.pop("dashboard", None)
            (d / "status.json").write_text(json.dumps(st, indent=2) + "\n")
        logs = d / "logs"
        logs.mkdir()
        for task in [None] + [str(t.get("task")) for t in st.get("tasks", [])]:
            text = self._loom("logs", str(self.job), *(["--task", task] if task else []))
            if text is not None:
                name = task.replace(":", "-") if task else "all"
                (logs / f"{name}.log").write_text(text)

    def close(self, status: str, state: str, exit_code: Optional[int],
              error: Optional[str] = None) -> None:
        """The job is over: the rest of its metrics, its files as
        artifacts, its end. status is MLflow's (FINISHED, FAILED, KILLED);
        state and exit_code are loom's. Failures are said, never raised:
        the job's own outcome is what the caller gets."""
        if self.thread is not None:
            # loom events --follow ends once the job has ended and its log is quiet
            self.thread.join(60)
            if self.thread.is_alive() and self.proc is not None:
                self.proc.kill()
                self.thread.join()
        if self.job is not None:
            self._missed()
            if not self.spec_logged:
                self._spec()
        tags = {"loom.state": state}
        if exit_code is not None:
            tags["loom.exit_code"] = str(exit_code)
        if error:
            tags["loom.error"] = error[:5000]
        try:
            for k, v in tags.items():
                self.client.set_tag(self.run_id, k, v)
            if self.job is not None:
                with tempfile.TemporaryDirectory(prefix="loom-mlflow-") as tmp:
                    d = Path(tmp) / "loom"
                    d.mkdir()
                    self._files(d)
                    self.client.log_artifacts(self.run_id, str(d), "loom")
        except Exception as ex:
            self._warn("log the job's files", ex)
        try:
            self.client.set_terminated(self.run_id, status)
        except Exception as ex:
            self._warn(f"end the run as {status}", ex)


def _metric(line: bytes) -> Any:
    """An event line's MLflow Metric, None for another event."""
    from mlflow.entities import Metric
    try:
        ev = json.loads(line)
        if ev.get("event") != "metric":
            return None
        v = float(ev["value"])
        if not math.isfinite(v):
            return None
        return Metric(metric_key(ev), v, int(float(ev["t"]) * 1000), int(ev["step"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _no_env(v: Any) -> Any:
    """v with every env: map's values left out (they may be secrets)."""
    if isinstance(v, dict):
        return {k: ({n: "(not logged)" for n in x} if k == "env" and isinstance(x, dict)
                    else _no_env(x)) for k, x in v.items()}
    return v


def status_of(state: str) -> str:
    """MLflow's end status for loom's job state."""
    return {"succeeded": "FINISHED", "killed": "KILLED"}.get(state, "FAILED")


def open_run(arg: MlflowArg, env: Mapping[str, str], name: str,
             params: Mapping[str, str]) -> Optional[Tracking]:
    """The job's MLflow run, or None when tracking is off (see wanted).
    env is loom's environment (LOOM_HOME, MLFLOW_* as the caller has them)."""
    uri = wanted(arg, env)
    if uri is None:
        return None
    return Tracking(uri, name, env, params)
