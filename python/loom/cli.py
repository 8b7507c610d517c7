"""The command line from Python: run, submit, status, logs, events, kill,
each running the `loom` binary (loom._find.binary()) as a user would, with
the same LOOM_HOME (the environment's, or home=...).

A spec is a path to a YAML (or JSON) file, a loom.Spec, or a dict. A Spec
or dict is written as JSON to a temporary file that loom reads, so it is
checked by the same C parser with the same rules and file:line:column
errors (the line and column of Spec.to_json()'s text). loom has no
check-only command: a spec is checked when run or submit is given it, and
a bad one starts nothing (exit status 2, raised as SpecError).

Exit statuses become exceptions carrying loom's stderr message and exit
status: 2 SpecError, 3 BackendError, anything else CommandError. A job
that ran and failed (exit status 1) is a Result with ok False (or
JobFailed with check=True)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._find import binary
from .errors import BackendError, CommandError, JobTimeout, LoomError, SpecError
from .spec import Role, Spec

PathLike = Union[str, "os.PathLike[str]"]
SpecLike = Union[PathLike, Spec, Mapping[str, Any]]


class JobFailed(CommandError):
    """run(check=True): the job failed past its retries (exit status 1);
    message is loom's root cause, result the Result."""

    result: "Result"

    def __init__(self, message: str, result: "Result") -> None:
        super().__init__(message, result.exit_code, result.argv, result.stdout)
        self.result = result


@dataclass
class Result:
    """What run() returns for a job that ran: ok is exit_code == 0."""

    job_id: str
    state: str                 # loom status's: succeeded, failed, killed...
    exit_code: int             # loom run's: 0 succeeded, 1 failed
    stdout: str                # the tasks' output, [role:index] prefixed
    stderr: str                # loom's own messages (job id, root cause)
    job_dir: Path              # $LOOM_HOME/jobs/<id>
    argv: List[str] = field(default_factory=list)
    # loom.run(fn): each task's return value, by task ("worker:1"; with
    # procs > 1, "worker:1/LOCAL_RANK"); empty for a spec's job
    values: Dict[str, Any] = field(default_factory=dict)
    # loom.run(fn) off the local backend: the archives shipped with the job
    # (what, url, sha256, packed, bytes, uploaded, seconds; see loom.pyenv)
    shipped: List[Dict[str, Any]] = field(default_factory=list)
    # the job's MLflow run (run(mlflow=...), loom._mlflow), or None
    mlflow_run_id: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def status(self) -> Dict[str, Any]:
        """The job's state now (loom status --json), as status() gives it."""
        return status(self.job_id, home=self.job_dir.parent.parent)


def _env(home: Optional[PathLike], env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    e = dict(os.environ)
    if home is not None:
        e["LOOM_HOME"] = os.fspath(home)
    if env:
        e.update(env)
    return e


def _home(e: Mapping[str, str]) -> Path:
    return Path(e.get("LOOM_HOME") or Path.home() / ".loom").expanduser().absolute()


def _raise(argv: Sequence[str], rc: int, stdout: str, stderr: str) -> None:
    msg = stderr.rstrip("\n") or f"loom exited with status {rc}"
    cls = {2: SpecError, 3: BackendError}.get(rc, CommandError)
    raise cls(msg, rc, argv, stdout)


def _loom(args: Sequence[str], home: Optional[PathLike] = None,
          env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> str:
    """Runs loom ARGS; its stdout, or the exception for its exit status."""
    argv = [binary(), *args]
    r = subprocess.run(argv, env=_env(home, env), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        _raise(argv, r.returncode, r.stdout, r.stderr)
    return r.stdout


@contextmanager
def _spec_file(spec: SpecLike) -> Iterator[str]:
    """A path loom can read the spec from (a temporary JSON file for a Spec
    or a dict, removed afterwards)."""
    if isinstance(spec, (str, os.PathLike)):
        yield os.fspath(spec)
        return
    s = spec if isinstance(spec, Spec) else Spec.from_dict(spec)
    with tempfile.TemporaryDirectory(prefix="loom-spec-") as d:
        name = s.name if isinstance(s.name, str) and s.name.replace("-", "").replace(
            "_", "").isalnum() else "job"
        p = os.path.join(d, name + ".json")
        with open(p, "w") as f:
            f.write(s.to_json())
        yield p


def _job_args(path: str, backend: Optional[str], overrides: Optional[Mapping[str, Any]],
              bind: Optional[str], advertise: Optional[str]) -> List[str]:
    args = [path]
    if backend:
        args += ["--backend", backend]
    for k, v in (overrides or {}).items():
        v = json.dumps(v) if isinstance(v, (list, dict, bool)) else str(v)
        args += ["--set", f"{k}={v}"]
    if bind:
        args += ["--bind", bind]
    if advertise:
        args += ["--advertise", advertise]
    return args


def _pump(src: IO[str], keep: List[str], echo: Optional[IO[str]],
          on_line: Optional[Callable[[str], None]] = None) -> None:
    for line in src:
        keep.append(line)
        if on_line:
            on_line(line)
        if echo is not None:
            echo.write(line)
            echo.flush()


def _job_id(stderr: str) -> Optional[str]:
    for line in stderr.splitlines():
        if line.startswith("loom: job ") and len(line.split()) == 3:
            return line.split()[2]
    return None


class _Run:
    """A `loom run` process, its output pumped into memory (and to
    sys.stdout/sys.stderr with echo) as it comes. loom.run and
    loom.spark.run both drive one."""

    def __init__(self, argv: List[str], env: Dict[str, str], echo: bool,
                 on_err_line: Optional[Callable[[str], None]] = None) -> None:
        self.argv, self.env = argv, env
        self.out: List[str] = []
        self.err: List[str] = []
        self.timed_out = False
        self.timeout: Optional[float] = None
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
        assert self.p.stdout is not None and self.p.stderr is not None
        self.pumps = [threading.Thread(target=_pump, daemon=True,
                                       args=(self.p.stdout, self.out, sys.stdout if echo else None)),
                      threading.Thread(target=_pump, daemon=True,
                                       args=(self.p.stderr, self.err, sys.stderr if echo else None,
                                             on_err_line))]
        for t in self.pumps:
            t.start()

    def stop(self, grace: float) -> None:
        """Stops the whole job as Ctrl-C does, and waits for loom."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(grace)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def wait(self, timeout: Optional[float],
             poll: Optional[Callable[[], Optional[str]]] = None) -> None:
        """Waits until loom ends; past timeout seconds, or once poll (called
        every 0.1 s) returns a reason, stops the job (the reason goes to the
        job's stderr). Anything raised meanwhile (KeyboardInterrupt) stops
        the job too. The output is all read when it returns."""
        self.timeout = timeout
        t0 = time.monotonic()
        try:
            while self.p.poll() is None:
                left = None if timeout is None else timeout - (time.monotonic() - t0)
                if left is not None and left <= 0:
                    self.timed_out = True
                    break
                why = poll() if poll else None
                if why:
                    self.err.append(why + "\n")
                    break
                try:
                    self.p.wait(left if poll is None else min(0.1, left or 0.1))
                except subprocess.TimeoutExpired:
                    pass
            self.stop(60 if poll else 30)
        except BaseException:  # KeyboardInterrupt, an error here: stop the job too
            if self.p.poll() is None:
                self.p.send_signal(signal.SIGINT)
                self.p.wait()
            raise
        finally:
            for t in self.pumps:
                t.join()

    def result(self, check: bool, what: str, ok: Sequence[int] = (0, 1)) -> Result:
        """The job's Result, or the exception its end calls for."""
        stdout, stderr, rc = "".join(self.out), "".join(self.err), self.p.returncode
        job = _job_id(stderr)
        if self.timed_out:
            raise JobTimeout(f"{what}: the job {job or '(not started)'} was still running after "
                             f"{self.timeout} s and was stopped\n" + stderr.rstrip("\n"), rc,
                             self.argv, stdout, job)
        if rc not in ok or job is None:
            _raise(self.argv, rc, stdout, stderr)
        assert job is not None
        job_dir = _home(self.env) / "jobs" / job
        try:
            state = json.loads(_loom(["status", job, "--json"], env=self.env))["state"]
        except (LoomError, OSError, ValueError, KeyError, TypeError):
            state = "succeeded" if rc == 0 else "failed"
        res = Result(job, state, rc, stdout, stderr, job_dir, self.argv)
        if check and rc:
            raise JobFailed(stderr.rstrip("\n"), res)
        return res


def run(spec: Union[SpecLike, Callable[..., Any]], *, backend: Optional[str] = None,
        overrides: Optional[Mapping[str, Any]] = None, bind: Optional[str] = None,
        advertise: Optional[str] = None, timeout: Optional[float] = None, check: bool = False,
        echo: bool = False, home: Optional[PathLike] = None,
        env: Optional[Mapping[str, str]] = None, args: Sequence[Any] = (),
        kwargs: Optional[Mapping[str, Any]] = None,
        roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]] = None,
        num_workers: Optional[int] = None,
        python: Union[None, str, Mapping[str, str]] = None,
        files: Optional[Mapping[str, str]] = None, queue: Optional[str] = None,
        retries: int = 0, name: Optional[str] = None,
        mlflow: Union[None, bool, str] = None) -> Result:
    """`loom run SPEC`: runs the job and waits for it. Returns a Result
    (ok, state, exit_code, the tasks' output) for a job that ran, failed
    or not; with check=True a failed job raises JobFailed. overrides are
    --set key=value pairs ({"roles.worker.instances": 4}); echo streams the
    output to sys.stdout/sys.stderr as it comes; timeout (seconds) stops
    the job as Ctrl-C would and raises JobTimeout; home sets LOOM_HOME,
    env adds to the environment loom (and so every task) gets. Raises
    SpecError (exit status 2), BackendError (3), CommandError (other).

    run(fn, args=, kwargs=, roles= or num_workers=, ...): when the first
    argument is callable, every task runs fn(*args, **kwargs) (shipped
    with cloudpickle) and the Result's values maps each task ("worker:1")
    to its return value. roles are Roles without a command (default: one
    worker; num_workers=N is {"worker": Role(instances=N)}); python is
    the tasks' interpreter (default: sys.executable on the local backend,
    python3 on the task's PATH elsewhere), "auto" (the caller's virtual
    environment, packed and cached: loom.pyenv), an environment archive,
    or a dict of those by node label; off the local backend loom and the
    caller's modules are shipped too (Result.shipped says what); files,
    queue, retries and name are the spec's. An exception in a task raises TaskError (its task and
    traceback) once the job has stopped; a job that failed otherwise
    raises JobFailed. NotPicklable (fn or an argument cannot be pickled),
    NotFound (no cloudpickle, no such archive) and PackError (an
    environment that cannot be packed) are raised before anything
    starts.

    mlflow: with mlflow importable and MLFLOW_TRACKING_URI set (or
    mlflow=True, or mlflow="URI"; mlflow=False never) the job is one
    MLflow run: params, metrics, logs and its end (loom._mlflow);
    Result.mlflow_run_id names it. TrackingError (before anything starts)
    when it cannot be opened."""
    from . import _mlflow
    e = _env(home, env)
    if not callable(spec):
        given = [k for k, v in (("args", args), ("kwargs", kwargs), ("roles", roles),
                                ("num_workers", num_workers), ("python", python),
                                ("files", files), ("queue", queue), ("retries", retries),
                                ("name", name)) if v]
        if given:
            raise TypeError(f"loom.run: {', '.join(given)} apply to a function "
                            "(loom.run(fn, ...)); for a spec set them in the spec")
    tr = _mlflow.open_run(mlflow, e, _run_name(spec, name),
                          _mlflow.arg_params(args, kwargs) if callable(spec) else {})
    if tr is not None:
        added = tr.task_env()
        if callable(spec):
            env = dict(env or {}, **added)
        else:
            overrides = dict(overrides or {}, **{f"env.{k}": v for k, v in added.items()})
    try:
        if callable(spec):
            res = _run_fn(spec, e, backend=backend, overrides=overrides, bind=bind,
                          advertise=advertise, timeout=timeout, echo=echo, env=env, args=args,
                          kwargs=kwargs, roles=roles, num_workers=num_workers, python=python,
                          files=files, queue=queue, retries=retries, name=name,
                          on_err_line=tr.on_line if tr else None)
        else:
            with _spec_file(spec) as path:
                argv = [binary(), "run", *_job_args(path, backend, overrides, bind, advertise)]
                run = _Run(argv, e, echo, tr.on_line if tr else None)
                run.wait(timeout)
            res = run.result(check, "loom run")
    except BaseException as ex:
        if tr is not None:
            got: Optional[Result] = getattr(ex, "result", None)
            if got is not None:
                got.mlflow_run_id = tr.run_id
            killed = isinstance(ex, (JobTimeout, KeyboardInterrupt))
            tr.close("KILLED" if killed else "FAILED",
                     got.state if got else ("killed" if killed else "failed"),
                     got.exit_code if got else getattr(ex, "exit_code", None), _first(ex))
        raise
    if tr is not None:
        tr.close(_mlflow.status_of(res.state), res.state, res.exit_code)
        res.mlflow_run_id = tr.run_id
    return res


def _first(ex: BaseException) -> str:
    """An exception's first line, for the MLflow run's loom.error tag."""
    lines = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {lines[0] if lines else ''}"


def _run_name(spec: Union[SpecLike, Callable[..., Any]], name: Optional[str]) -> str:
    """The job's name as its spec gives it (MLflow's run name)."""
    if name:
        return name
    if callable(spec):
        from .functions import job_name
        return job_name(spec)
    if isinstance(spec, Spec):
        return str(spec.name or "job")
    if isinstance(spec, Mapping):
        return str(spec.get("name") or "job")
    return Path(os.fspath(spec)).stem


def _run_fn(fn: Callable[..., Any], e: Dict[str, str], *, backend: Optional[str],
            overrides: Optional[Mapping[str, Any]], bind: Optional[str],
            advertise: Optional[str], timeout: Optional[float], echo: bool,
            env: Optional[Mapping[str, str]], args: Sequence[Any],
            kwargs: Optional[Mapping[str, Any]],
            roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]],
            num_workers: Optional[int], python: Union[None, str, Mapping[str, str]],
            files: Optional[Mapping[str, str]], queue: Optional[str], retries: int,
            name: Optional[str],
            on_err_line: Optional[Callable[[str], None]] = None) -> Result:
    """loom.run(fn, ...): see run() and loom.functions."""
    from . import functions
    shipped: List[Dict[str, Any]] = []
    with functions.make_tmp() as tmp:
        spec = functions.build(fn, tmp, args=args, kwargs=kwargs, roles=roles,
                               num_workers=num_workers, backend=backend, python=python,
                               files=files, env=env, queue=queue, retries=retries, name=name,
                               python_env=e, shipped=shipped)
        with _spec_file(spec) as path:
            argv = [binary(), "run", *_job_args(path, backend, overrides, bind, advertise)]
            run = _Run(argv, e, echo, on_err_line)
            run.wait(timeout)
        res = run.result(False, "loom run")
    values, err = functions.collect(events(res.job_id, env=e))
    res.values = values
    res.shipped = shipped
    if err is not None and res.exit_code:
        te = functions.task_error(err, res.job_id)
        te.result = res
        raise te
    if res.exit_code:
        raise JobFailed(res.stderr.rstrip("\n"), res)
    return res


def submit(spec: SpecLike, *, backend: Optional[str] = None,
           overrides: Optional[Mapping[str, Any]] = None, bind: Optional[str] = None,
           advertise: Optional[str] = None, home: Optional[PathLike] = None,
           env: Optional[Mapping[str, str]] = None) -> str:
    """`loom submit SPEC`: starts the job detached and returns its id once
    its coordinator is up. Follow it with status(), logs(), events(); stop
    it with kill(). Raises SpecError, BackendError, CommandError."""
    with _spec_file(spec) as path:
        out = _loom(["submit", *_job_args(path, backend, overrides, bind, advertise)], home, env)
    return out.strip().splitlines()[-1].strip()


def status(job: str = "last", *, home: Optional[PathLike] = None,
           env: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """`loom status --json JOB`: the job's state (job, name, state,
    attempt, exit_status, tasks with their states, ranks, exit codes...).
    JOB is an id, a unique prefix of one, or "last"."""
    return json.loads(_loom(["status", job, "--json"], home, env))


def logs(job: str = "last", task: Optional[str] = None, *, home: Optional[PathLike] = None,
         env: Optional[Mapping[str, str]] = None) -> str:
    """`loom logs JOB [--task role:index]`: one task's log, or every task's
    lines interleaved and prefixed."""
    return _loom(["logs", job] + (["--task", task] if task else []), home, env)


def events(job: str = "last", *, home: Optional[PathLike] = None,
           env: Optional[Mapping[str, str]] = None) -> List[Dict[str, Any]]:
    """`loom events JOB --json`: the job's event log, a dict an event (t,
    job, task, attempt, event, details)."""
    out = _loom(["events", job, "--json"], home, env)
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def kill(job: str = "last", *, home: Optional[PathLike] = None,
         env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = 60) -> None:
    """`loom kill JOB`: stops every task of a running job and waits until
    it has."""
    _loom(["kill", job], home, env, timeout)
