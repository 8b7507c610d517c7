"""The exceptions of the loom package. Every one is a LoomError.

    LoomError          a libloom call failed (code: the negative LOOM_E* value)
      CommandError     a `loom` command failed: its exit status and stderr
        SpecError      exit 2: a usage or spec error (file:line:column ...)
        BackendError   exit 3: a backend or infrastructure error
        JobTimeout     run(timeout=...) ran out; the job was stopped
      TaskError        loom.run(fn): a task's function raised (its task, traceback)
      NotPicklable     loom.run(fn): fn or an argument cannot be pickled
      PackError        loom.run(fn, python=...): an environment or a module
                       directory that cannot be packed (the path named)
      NotFound         no `loom` binary or libloom.so where the package looked
                       (or cloudpickle, for loom.run(fn))
      NotInTask        loom.task() outside a loom job
"""
import sys
from typing import Any, Optional, Sequence


class LoomError(Exception):
    """A libloom call failed: code is the negative LOOM_E* value, name its
    name (LOOM_EIO...), and the message loom_errmsg()'s detail. The base
    class of every exception this package raises."""

    code: int
    name: str
    message: str

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        lib = getattr(sys.modules.get("loom._lib"), "lib", None)
        self.name = (lib.loom_err_name(code) or b"?").decode() if lib is not None else "?"
        if not message and lib is not None:
            message = (lib.loom_strerror(code) or b"").decode()
        self.message = message
        super().__init__(f"{self.name}: {message}")


class CommandError(LoomError):
    """A `loom` command failed. message is what loom printed on stderr
    (str(e) too), exit_code its exit status (also .code), argv the
    command line."""

    exit_code: int
    argv: Sequence[str]
    stdout: str

    def __init__(self, message: str, exit_code: int, argv: Sequence[str] = (),
                 stdout: str = "") -> None:
        self.code = self.exit_code = exit_code
        self.name = f"exit {exit_code}"
        self.message = message
        self.argv = list(argv)
        self.stdout = stdout
        Exception.__init__(self, message)


class SpecError(CommandError):
    """Exit status 2: a usage or spec error, e.g. `loom: job.json:5:20:
    roles.worker.instances must be between 1 and 100000, got 0` (also
    resources the cluster can never give). The message is loom's own."""


class BackendError(CommandError):
    """Exit status 3: a backend or infrastructure error."""


class FsError(CommandError, OSError):
    """`loom fs` failed where the package moves files (HDFS): message is
    loom's, exit_code its status. An OSError too, as a local file's
    failure would be."""


class JobTimeout(CommandError):
    """run(timeout=...) ran out: the job was stopped (as by Ctrl-C) and
    this raised. job_id names it (None if it had not started)."""

    job_id: Optional[str]

    def __init__(self, message: str, exit_code: int, argv: Sequence[str] = (),
                 stdout: str = "", job_id: Optional[str] = None) -> None:
        super().__init__(message, exit_code, argv, stdout)
        self.job_id = job_id


class NotFound(LoomError, ImportError):  # type: ignore[misc]  # ImportError.name is unused
    """No `loom` binary or libloom.so was found; the message lists where
    the package looked and how to fix it (set LOOM_BIN / LOOM_LIBRARY, or
    build loom). An ImportError too, as a missing libloom was before."""

    looked: Sequence[str]

    def __init__(self, message: str, looked: Sequence[str] = ()) -> None:
        self.code = 0
        self.name = "not found"
        self.message = message
        self.looked = list(looked)
        Exception.__init__(self, message)


class NotInTask(LoomError):
    """loom.task() outside a loom job: the task's environment (LOOM_JOB_ID,
    LOOM_ROLE, LOOM_INDEX, ...) is not set."""

    def __init__(self, message: str) -> None:
        self.code = 0
        self.name = "not in a task"
        self.message = message
        Exception.__init__(self, message)


class TaskError(LoomError):
    """loom.run(fn): a task's function raised (or could not be loaded, or
    its return value could not be pickled). Raised in the caller once the
    job has stopped (it fails fast, as for a command). task names the task
    ("worker:1"), traceback is the task's traceback text, remote_type the
    exception's class name, module the module a task could not import
    while loading the function (None otherwise), job_id the job, result
    the job's Result (values: what the other tasks returned, if any).
    str(e) is the message and then the traceback."""

    result: Any = None
    task: str
    traceback: str
    module: Optional[str]
    job_id: Optional[str]
    remote_type: str

    def __init__(self, message: str, task: str, traceback: str = "",
                 module: Optional[str] = None, job_id: Optional[str] = None,
                 remote_type: str = "") -> None:
        self.code = 0
        self.name = "task failed"
        self.message = message
        self.task = task
        self.traceback = traceback
        self.module = module
        self.job_id = job_id
        self.remote_type = remote_type
        text = message
        if traceback:
            text += f"\n\n{task}'s traceback (job {job_id}):\n" + traceback.rstrip("\n")
        Exception.__init__(self, text)


class NotPicklable(LoomError, TypeError):
    """loom.run(fn): the function, an argument, or something the function
    closes over cannot be pickled; nothing was started. what names it
    ("args[0] (a _thread.lock)", "lock (...), a variable that function
    train closes over")."""

    what: str

    def __init__(self, message: str, what: str) -> None:
        self.code = 0
        self.name = "not picklable"
        self.message = message
        self.what = what
        Exception.__init__(self, message)


class PackError(LoomError, ValueError):
    """loom.run(fn, python=...): the environment or a module directory to
    ship cannot be packed (not a virtual environment, a file that cannot be
    read, modules too large); the message names the path. Nothing was
    started."""

    def __init__(self, message: str) -> None:
        self.code = 0
        self.name = "cannot pack"
        self.message = message
        Exception.__init__(self, message)


class TrackingError(LoomError):
    """loom.run(..., mlflow=...): MLflow tracking was asked for and cannot
    be done: the module is not importable, or the tracking server cannot
    be reached or refused to open the run. The message says which and
    where. Nothing was started."""

    def __init__(self, message: str) -> None:
        self.code = 0
        self.name = "mlflow"
        self.message = message
        Exception.__init__(self, message)
