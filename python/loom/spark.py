"""loom on Spark: run(spark, spec) runs a loom job inside a Spark
application, from its driver.

The coordinator runs in the driver (`loom run --backend spark`, bound to
spark.driver.host); the job's tasks, every role (ps, evaluator and
tensorboard included), run as one barrier stage of one Spark task per loom
task. Each Spark task runs `loom agent` (the driver's binary, or the copy
shipped with SparkContext.addFile when the executor's host has none), with
attempt "any" and its Spark task attempt id as its fence, and runs it again each
time it ends, until the coordinator is gone (an agent whose task waits for
none, its task done or running, waits connected for the task's next launch):
job retries and task restarts
happen inside the one stage, and when Spark relaunches the whole stage (an
executor lost), the new stage's agents take the next attempt while any
agent of the earlier stage attempt is refused.

Before anything starts, the spark backend refuses what the application
cannot give (exit status 2, raised as SpecError): dynamic allocation on,
fewer task slots than tasks, more than one task per executor for a role
with GPUs. The job's output streams to the driver prefixed [role:index], as
on every backend. Ctrl-C (KeyboardInterrupt), an exception in the driver,
a timeout or `loom kill` stop the job and cancel the Spark job group;
nothing of the job outlives run().

train(spark, df, spec, epochs=N) and inference(spark, df, spec) feed a
DataFrame to the job's tasks through loom's feed: Spark writes the
DataFrame's partitions, Arrow batch by Arrow batch (mapInArrow, no Python
call per row), as fixed-width records into a spill directory, and the
job's feed reads them (`fixed:<bytes>`) for every epoch, at the tasks'
pace, without Spark computing the DataFrame again. When the application
has a task slot beyond the job's tasks, the spill runs beside the job
(a Spark job on the other slots) and the feed takes each partition's file
as soon as it is whole (feed.follow); with one epoch the feed removes
each file once read (feed.consume) and Spark computes a partition only
while the spill holds at most `ahead` bytes (back-pressure)."""
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from ._find import binary
from .cli import (JobFailed, Result, SpecLike, _env, _job_args, _job_id, _loom, _Run, _spec_file,
                  events)
from ._spill import (_WRITTEN, _as_df, _drop_spill, _fs_bin, _put_text, _record_width, _remote,
                     _ship, _spill_dir, _with_feed, _writer, spill)
from .errors import CommandError
from .spec import Role, Spec

__all__ = ["run", "slots", "spill", "train", "inference"]


def _conf(sc: Any, key: str, default: Optional[str] = None) -> Optional[str]:
    try:  # one py4j call (sc.getConf() copies the whole configuration: ~6 ms)
        v = sc._jsc.sc().conf().get(key, default)
    except Exception:  # not a py4j SparkContext: pyspark's own copy
        v = sc.getConf().get(key, default)
    return None if v is None else str(v)


def _executors(sc: Any) -> Optional[List[Dict[str, Any]]]:
    """The application's active executors, as Spark's REST API gives them
    (id, totalCores): read from the driver's status store over py4j (about
    1 ms), else from the REST API (about 10 ms), else None (the UI is off)."""
    try:
        it = sc._jsc.sc().statusStore().executorList(True).iterator()
        out = []
        while it.hasNext():
            e = it.next()
            out.append({"id": str(e.id()), "totalCores": int(e.totalCores()), "isActive": True})
        return out
    except Exception:  # another Spark's internals: its public REST API
        pass
    url = sc.uiWebUrl
    if not url:
        return None
    try:
        with urllib.request.urlopen(
                f"{url}/api/v1/applications/{sc.applicationId}/executors", timeout=10) as r:
            return [e for e in json.loads(r.read()) if e.get("isActive", True)]
    except (OSError, ValueError):
        return None


def slots(sc: Any, wait: float = 30.0, need: Optional[int] = None) -> Dict[str, Any]:
    """The task slots of the application's executors: {"slots", "executors",
    "slots_per_executor", "how"}. Waits up to wait seconds for executors to
    register: until there are need slots, or spark.executor.instances
    executors, or (need unknown) their number holds still for 1 s. In
    local[N] the driver's cores are the slots, at once."""
    task_cpus = int(_conf(sc, "spark.task.cpus", "1") or 1)
    want = _conf(sc, "spark.executor.instances")
    master = str(getattr(sc, "master", "") or "")
    local = master == "local" or master.startswith("local[")  # the driver alone
    deadline = time.monotonic() + wait
    last, since = -1, time.monotonic()
    while True:
        ex = _executors(sc)
        if ex is None:
            n = int(sc.defaultParallelism)
            return {"slots": n // task_cpus, "executors": 1, "slots_per_executor": n // task_cpus,
                    "how": f"sc.defaultParallelism {n}, spark.task.cpus {task_cpus}"}
        # executors; in local[N] the driver, which then has the cores (in
        # a cluster it has none, and executors may still be registering)
        workers = [e for e in ex if e.get("id") != "driver"] or [
            e for e in ex if int(e.get("totalCores", 0)) > 0]
        now = time.monotonic()
        if len(workers) != last:
            last, since = len(workers), now
        enough = need is not None and sum(
            int(e.get("totalCores", 0)) // task_cpus for e in workers) >= need
        # short of the spec's tasks, more executors may still come (a
        # cluster starts them one by one, seconds apart): wait for them
        # until the deadline, unless no more can come (local[N]) or the
        # application says how many it has (spark.executor.instances)
        settled = enough or local or (want is not None and len(workers) >= int(want)) or (
            need is None and len(workers) > 0 and now - since >= 1.0)
        if settled or now >= deadline:
            per = [int(e.get("totalCores", 0)) // task_cpus for e in workers]
            cores = sorted({int(e.get("totalCores", 0)) for e in workers})
            return {"slots": sum(per), "executors": len(workers),
                    "slots_per_executor": max(per) if per else 0,
                    "how": f"{len(workers)} executor{'s' if len(workers) != 1 else ''} with "
                           f"{'/'.join(map(str, cores)) or 0} cores, spark.task.cpus {task_cpus}"}
        time.sleep(0.25)


def _max_failures(sc: Any) -> Optional[int]:
    """spark.task.maxFailures as the application's scheduler applies it:
    local and local[N] masters allow 1 (local[N,F] allows F), others the
    setting (default 4)."""
    master = str(getattr(sc, "master", "") or "")
    m = re.fullmatch(r"local\[(?:\d+|\*)\s*,\s*(\d+)\]", master)
    if m:
        return int(m.group(1))
    if master == "local" or re.fullmatch(r"local\[(?:\d+|\*)\]", master):
        return 1
    try:
        return int(_conf(sc, "spark.task.maxFailures", "4") or 4)
    except ValueError:
        return None  # Spark itself refuses such a setting


def _tasks(spec: SpecLike, overrides: Optional[Mapping[str, Any]]) -> Optional[int]:
    """How many tasks a Spec or dict has (None for a file, or with an
    override of instances: the C parser counts those)."""
    from .spec import Spec
    if isinstance(spec, (str, os.PathLike)) or any("instances" in k for k in overrides or {}):
        return None
    try:
        d = spec.to_dict() if isinstance(spec, Spec) else dict(spec)
        return sum(int((r or {}).get("instances", 1)) for r in d["roles"].values())
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a bad spec: the C parser says what is wrong


def _bind_address(sc: Any) -> str:
    host = _conf(sc, "spark.driver.host") or socket.gethostname()
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise CommandError(f"loom.spark: spark.driver.host {host!r} does not resolve to an "
                           "address the executors can reach the coordinator at", 3)


def _stage(names: List[str], addr: str, secret: str, exe: str, exe_name: str,
           pause: float) -> Callable[[Any], Any]:
    """The Spark task of every loom task, as a closure Spark ships to the
    executors by value (no import of loom there)."""

    def loom_task(_rows: Any) -> Any:
        import json as _json
        import os as _os
        import subprocess as _sp
        import time as _time

        from pyspark import BarrierTaskContext, SparkFiles

        ctx = BarrierTaskContext.get()
        p = ctx.partitionId()
        # the fence: this Spark task attempt's id, which every launch of
        # the stage raises (Spark numbers task attempts in launch order)
        fence = ctx.taskAttemptId()
        path = exe if _os.access(exe, _os.X_OK) else SparkFiles.get(exe_name)
        env = dict(_os.environ, LOOM_COORD=addr, LOOM_SECRET=secret, LOOM_TASK=names[p],
                   LOOM_ATTEMPT="any", LOOM_FENCE=str(fence),
                   LOOM_SPARK_FILES=_os.path.abspath(SparkFiles.getRootDirectory()))
        res = ctx.resources()
        if "gpu" in res:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(res["gpu"].addresses)
        runs, rc = 0, 0
        while True:
            if runs or rc:
                env["LOOM_RESPAWN"] = "1"  # a refused connection: the job is over
            # the agent dies with this Python worker (PR_SET_PDEATHSIG), so
            # a Spark task killed by Spark takes its loom task with it
            rc = _sp.call([path, "agent"], env=env, stdin=_sp.DEVNULL)
            if rc == 5:
                # this stage attempt lost a task: the job waits for Spark to
                # launch the stage again, which failing this task makes it do
                raise RuntimeError(f"loom: {names[p]}: this Spark stage attempt (fence {fence}) "
                                   "lost a task; the job waits for the stage to be launched "
                                   "again")
            if rc == 3 or rc == 6:  # the coordinator is gone; the job is ending
                break
            if rc == 4:  # refused for now: another agent waits for its task already
                _time.sleep(pause)
                continue
            runs += 1
        yield _json.dumps({"partition": p, "task": names[p], "fence": fence, "runs": runs,
                           "last_exit": rc})

    return loom_task


def _status(job: str, e: Mapping[str, str], secret: bool = False) -> Optional[Dict[str, Any]]:
    """`loom status JOB --json` (with --secret, the job's secret too), or
    None while the job has no state yet."""
    try:
        return json.loads(_loom(["status", job, "--json", *(["--secret"] if secret else [])],
                                env=e, timeout=60))
    except (CommandError, ValueError, subprocess.SubprocessError):
        return None


def _wait_coordinator(job: str, e: Mapping[str, str], proc: "subprocess.Popen[str]",
                      timeout: float) -> Tuple[str, str, List[str]]:
    """The coordinator's address, the secret and the task names in the
    coordinator's order, once `loom run` has them (`loom status --json
    --secret`: loom.spark starts the agents itself, with LOOM_SECRET)."""
    deadline = time.monotonic() + timeout
    while True:
        st = _status(job, e, secret=True)
        try:
            if st is not None:
                addr = st["coordinator"]["addr"]
                secret = st["secret"]
                names = [t["task"] for t in st["tasks"]]
                if addr and secret and names:
                    return addr, secret, names
        except (KeyError, TypeError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise CommandError(f"loom.spark: the coordinator of {job} did not come up "
                               f"within {timeout} s", 3)
        time.sleep(0.02)




def run(spark: Any, spec: Union[SpecLike, Callable[..., Any]], *,
        overrides: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
        check: bool = False, echo: bool = True, wait_executors: float = 30.0,
        home: Optional[Any] = None, env: Optional[Mapping[str, str]] = None,
        args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
        roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]] = None,
        num_workers: Optional[int] = None, python: Optional[str] = None,
        files: Optional[Mapping[str, str]] = None, retries: Optional[int] = None,
        name: Optional[str] = None, _beside: Optional["_Spiller"] = None) -> Result:
    """Runs the job of spec in the Spark application of spark (a
    SparkSession or SparkContext) and waits for it; returns a Result as
    loom.run does (ok, state, exit_code, the tasks' output). The spec's
    backend is spark whatever it names. echo streams the output to the
    driver's stdout/stderr as it comes; timeout (seconds) stops the job and
    raises JobTimeout; wait_executors is how long to wait for executors to
    register before counting task slots. A spec that sets no retries or
    max_restarts gets spark.task.maxFailures - 1 for them (each task may
    fail as often as Spark allows). Raises SpecError (exit status 2:
    a bad spec, or what Spark cannot give), BackendError, CommandError;
    with check=True a failed job raises JobFailed.

    run(spark, fn, args=, kwargs=, roles= or num_workers=, ...): as
    loom.run(fn): every task runs fn(*args, **kwargs) in its Spark task's
    executor and the Result's values maps each task to its return value;
    an exception in a task raises TaskError. The function goes to the
    executors as a file of the application (SparkContext.addFile), so
    Workers that share nothing with the driver get it; python (default:
    spark.pyspark.python, else PYSPARK_PYTHON, else the driver's own
    interpreter) runs it there, and the executors must import loom and
    cloudpickle (the driver's package directory leads PYTHONPATH)."""
    if callable(spec):
        return _run_fn(spark, spec, overrides=overrides, timeout=timeout, echo=echo,
                       wait_executors=wait_executors, home=home, env=env, args=args,
                       kwargs=kwargs, roles=roles, num_workers=num_workers, python=python,
                       files=files, retries=retries, name=name)
    _refuse_fn_kw(dict(args=args, kwargs=kwargs, roles=roles, num_workers=num_workers,
                       python=python, files=files, retries=retries, name=name),
                  "loom.spark.run")
    sc = getattr(spark, "sparkContext", spark)
    dyn = (_conf(sc, "spark.dynamicAllocation.enabled", "false") or "").lower() == "true"
    # with dynamic allocation on the job is refused whatever the slots:
    # no wait for executors (an idle application may have none to come)
    facts = slots(sc, 0 if dyn else wait_executors, _tasks(spec, overrides))
    facts["app"] = sc.applicationId
    mf = _max_failures(sc)
    if mf is not None:
        facts["max_failures"] = mf
    facts["dynamic_allocation"] = dyn
    exe = binary()
    bind = _bind_address(sc)
    e = _env(home, env)
    e["LOOM_SPARK"] = json.dumps(facts)
    group = f"loom-{uuid.uuid4().hex[:12]}"
    with _spec_file(spec) as path:
        argv = [exe, "run", *_job_args(path, "spark", overrides, bind, None)]
        job_box: List[str] = []

        def saw(line: str) -> None:
            if not job_box:
                j = _job_id(line)
                if j:
                    job_box.append(j)

        run_ = _Run(argv, e, echo, saw)
        stage_result: List[Any] = []
        stage_error: List[BaseException] = []
        stage_thread: List[threading.Thread] = []

        def stage(names: List[str], fn: Callable[[Any], Any]) -> None:
            try:
                sc.setJobGroup(group, f"loom job {job_box[0]}", interruptOnCancel=True)
                rdd = sc.parallelize(range(len(names)), len(names))
                # a shuffle after the barrier stage makes it a map stage,
                # which Spark relaunches whole when a task of it is lost (a
                # failed barrier result stage is only aborted)
                stage_result.extend(rdd.barrier().mapPartitions(fn).repartition(1).collect())
            except BaseException as ex:  # Spark gave up on the stage
                stage_error.append(ex)

        def poll() -> Optional[str]:
            # `loom run` prints the job id first, or fails before anything
            # starts (a bad spec, too few slots: exit 2)
            if _beside is not None and stage_thread:
                why = _beside.poll(job_box[0], e)
                if why:
                    return why
            if job_box and not stage_thread:
                addr, secret, names = _wait_coordinator(job_box[0], e, run_.p, 60)
                _ship(sc, exe)
                fn = _stage(names, addr, secret, exe, os.path.basename(exe), 0.5)
                stage_thread.append(threading.Thread(target=stage, args=(names, fn), daemon=True,
                                                     name=f"loom-spark-{job_box[0]}"))
                stage_thread[0].start()
            if stage_error and not stage_thread[0].is_alive():
                # Spark aborted the stage: nothing can run the tasks now
                return ("loom.spark: Spark ended the job's stage: "
                        + str(stage_error[0]).splitlines()[0][:400])
            return None

        try:
            run_.wait(timeout, poll)
        finally:
            if _beside is not None:
                _beside.stop()
            # once the coordinator is gone every Spark task ends by itself;
            # cancel the group for any that does not
            if stage_thread:
                stage_thread[0].join(30)
                if stage_thread[0].is_alive():
                    sc.cancelJobGroup(group)
                    stage_thread[0].join(60)
    res = run_.result(False, "loom.spark.run", ok=(0, 1, 130))
    res.spark_tasks = [json.loads(x) for x in stage_result]  # type: ignore[attr-defined]
    if check and res.exit_code:
        raise JobFailed(res.stderr.rstrip("\n"), res)
    return res


def _run_fn(spark: Any, fn: Callable[..., Any], *, overrides: Optional[Mapping[str, Any]],
            timeout: Optional[float], echo: bool, wait_executors: float, home: Optional[Any],
            env: Optional[Mapping[str, str]], **fkw: Any) -> Result:
    """loom.spark.run(spark, fn, ...): see run() and loom.functions."""
    with _fn_spec(spark, fn, env=env, **fkw) as spec:
        res = run(spark, spec, overrides=overrides, timeout=timeout, echo=echo,
                  wait_executors=wait_executors, home=home, env=env)
    return _fn_outcome(res, home, env)


@contextlib.contextmanager
def _fn_spec(spark: Any, fn: Callable[..., Any], *, env: Optional[Mapping[str, str]],
             args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
             roles: Optional[Mapping[str, Union[Role, Mapping[str, Any]]]] = None,
             num_workers: Optional[int] = None, python: Optional[str] = None,
             files: Optional[Mapping[str, str]] = None, retries: Optional[int] = None,
             name: Optional[str] = None) -> Iterator[Spec]:
    """The Spec whose tasks run fn(*args, **kwargs) in their Spark
    executors (loom.functions), its pickle shipped as a file of the
    application; removed when the block ends."""
    from . import functions
    sc = getattr(spark, "sparkContext", spark)
    py = (python or _conf(sc, "spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
          or sys.executable)
    with functions.make_tmp() as tmp:
        spec = functions.build(fn, tmp, args=args, kwargs=kwargs, roles=roles,
                               num_workers=num_workers, backend="spark", python=py, files=files,
                               env=env, queue=None, retries=retries, name=name)
        # the pickle goes to the executors as a file of the application
        # (the job directory's files are the driver's), under a name of its
        # own (addFile takes a name once); _fn finds it in SparkFiles'
        # directory (LOOM_SPARK_FILES, which the Spark task sets)
        fs = dict(spec.files or {})
        shipped = os.path.join(tmp, f"loom-fn-{uuid.uuid4().hex[:16]}.pkl")
        os.rename(fs.pop(functions.FILE), shipped)
        sc.addFile(shipped)
        spec.files = fs or None
        for r in spec.roles.values():
            assert isinstance(r, Role) and isinstance(r.command, list)
            r.command = [*r.command[:-1], os.path.basename(shipped)]
        yield spec


def _fn_outcome(res: Result, home: Optional[Any], env: Optional[Mapping[str, str]]) -> Result:
    """res with the tasks' return values (res.values); raises TaskError
    for a task's exception, JobFailed for a job that failed otherwise."""
    from . import functions
    values, err = functions.collect(events(res.job_id, env=_env(home, env)))
    res.values = values
    if err is not None and res.exit_code:
        te = functions.task_error(err, res.job_id)
        te.result = res
        raise te
    if res.exit_code:
        raise JobFailed(res.stderr.rstrip("\n"), res)
    return res


_FN_KEYS = ("args", "kwargs", "roles", "num_workers", "python", "files", "retries", "name")


def _refuse_fn_kw(fkw: Mapping[str, Any], what: str) -> None:
    """A TypeError naming the function's arguments fkw gives (not None or
    empty), for a call with a spec."""
    given = [k for k, v in fkw.items() if v is not None and v != ()]
    if given:
        raise TypeError(f"{what}: {', '.join(given)} apply to a function given in place of "
                        "the spec; for a spec set them in the spec")


def _split_fn_kw(spec: Any, kw: Dict[str, Any], what: str) -> Dict[str, Any]:
    """The function's arguments (_FN_KEYS) taken out of kw where spec is a
    function; a TypeError where it is a spec and kw gives any."""
    fkw = {k: kw.pop(k) for k in _FN_KEYS if k in kw}
    if not callable(spec):
        _refuse_fn_kw(fkw, what)
    return fkw


class _Spiller:
    """The spill running beside the job (train and inference with
    stream): once every task of the job has an agent (so the barrier
    stage holds its slots), a Spark job on the application's other slots
    writes df's partitions into the spill, each file renamed into place
    whole, and then the end file _DONE; the job's feed takes each file as it
    appears (feed.follow). With ahead > 0 a partition is computed only while
    the spill holds at most ahead bytes (the feed removes what it read:
    feed.consume). A failed spill stops the job with Spark's reason."""

    def __init__(self, sc: Any, df: Any, d: str, width: int, ahead: int, stall: float) -> None:
        self.sc, self.df, self.d, self.width, self.ahead, self.stall = sc, df, d, width, ahead, stall
        self.group = f"loom-spill-{uuid.uuid4().hex[:12]}"
        self.thread: Optional[threading.Thread] = None
        self.parts: List[Any] = []
        self.error: List[BaseException] = []
        self.started = self.ended = 0.0
        self.cancelled = False  # stop() cancelled it: its error is not the cause

    def poll(self, job: str, e: Mapping[str, str]) -> Optional[str]:
        if self.thread is None:
            st = _status(job, e)
            tasks = st.get("tasks") if isinstance(st, dict) else None
            if not tasks or any(t.get("state") in ("pending", "launched") for t in tasks):
                return None
            self.thread = threading.Thread(target=self._spill, daemon=True,
                                           name=f"loom-spill-{job}")
            self.thread.start()
            return None
        if self.error and not self.thread.is_alive():
            return ("loom.spark: the DataFrame's spill failed: "
                    + (str(self.error[0]).strip().splitlines() or ["?"])[0][:400])
        return None

    def _spill(self) -> None:
        self.started = time.time()
        try:
            self.sc.setJobGroup(self.group, "loom: spill the DataFrame into the job's feed",
                                interruptOnCancel=True)
            fn = _writer(self.d, self.width, self.ahead, self.stall,
                         _fs_bin(self.df) if _remote(self.d) else ("", ""))
            self.parts = self.df.mapInArrow(fn, _WRITTEN).collect()
            rows = sum(r["rows"] for r in self.parts)
            if rows == 0:
                raise ValueError("the DataFrame has no rows")
            _put_text(f"{self.d}/_DONE", json.dumps({"rows": rows, "record_bytes": self.width}))
            self.ended = time.time()  # the feed's input is whole
        except BaseException as ex:  # the Spark job failed or was cancelled
            self.error.append(ex)

    def stop(self) -> None:
        """Cancels the spill if it still runs (the job ended first)."""
        if self.thread is not None and self.thread.is_alive():
            self.cancelled = True
            self.sc.cancelJobGroup(self.group)
            self.thread.join(60)

    @property
    def failed(self) -> bool:
        """The spill ended with an error of its own (not cancelled)."""
        return bool(self.error) and not self.cancelled and self.thread is not None and \
            not self.thread.is_alive()

    def summary(self, columns: List[str]) -> Dict[str, Any]:
        parts = self.parts
        return {"files": sorted(r["file"] for r in parts if r["file"]),
                "rows": sum(r["rows"] for r in parts), "record_bytes": self.width,
                "columns": columns, "streamed": True,
                "waited_s": round(sum(r["waited"] for r in parts), 3),
                "spill_s": round(self.ended - self.started, 3) if self.ended else None,
                "spill_started": self.started, "spill_ended": self.ended}


def _stream(sc: Any, stream: Optional[bool], spec: SpecLike, kw: Mapping[str, Any]) -> bool:
    """Whether the spill can run beside the job: the application has a task
    slot the job's tasks leave free (stream=None decides so; stream=True
    insists, and is a SpecError without such a slot)."""
    if stream is False:
        return False
    from .errors import SpecError
    need = _tasks(spec, kw.get("overrides"))
    if need is None:
        if stream:
            raise SpecError("loom.spark: stream=True needs the spec's task count (a Spec or a "
                            "dict without an instances override)", 2)
        return False
    facts = slots(sc, float(kw.get("wait_executors", 30.0)), need + 1 if stream else need)
    if facts["slots"] > need:
        return True
    if stream:
        raise SpecError(f"loom.spark: stream=True needs a task slot beside the job's {need} "
                        f"tasks for the spill, and the application has {facts['slots']} "
                        f"({facts['how']})", 2)
    print(f"loom.spark: the job's {need} tasks take all {facts['slots']} task slots: the "
          "DataFrame is spilled whole before the job starts (one more slot lets it stream)",
          file=sys.stderr)
    return False



def _feed_run(spark: Any, df: Any, spec: SpecLike, d: str, feed: Dict[str, Any],
              stream: Optional[bool], ahead: int, stall: float, consume: bool,
              what: str, kw: Dict[str, Any]) -> Tuple[Result, Dict[str, Any]]:
    """Runs spec with df as its feed (feed holds the feed's other members),
    streamed beside the job or spilled first."""
    sc = getattr(spark, "sparkContext", spark)
    columns = [f"{f.name}:{f.dataType.simpleString()}" for f in df.schema.fields]
    if _stream(sc, stream, spec, kw):
        width = _record_width(df)
        if width == 0:
            raise ValueError(f"{what}: the DataFrame has no rows")
        f: Dict[str, Any] = {**feed, "input": [f"{d}/part-*.rec"],
                             "format": f"fixed:{width}", "follow": f"{d}/_DONE"}
        if consume:
            f["consume"] = True
        sp = _Spiller(sc, df, d, width, ahead if consume else 0, stall)
        full = _with_feed(spec, f)
        if "shuffle" in feed:  # inference reads in order whatever the spec says
            full["feed"]["shuffle"] = feed["shuffle"]
        try:
            r = run(spark, full, _beside=sp, **kw)
        except (JobFailed, CommandError):
            if sp.failed:  # the spill's error is the cause
                raise sp.error[0] from None
            raise
        if sp.failed:
            raise sp.error[0]
        return r, sp.summary(columns)
    sp_ = spill(df, d)
    if not sp_["rows"]:
        raise ValueError(f"{what}: the DataFrame has no rows")
    sp_["streamed"] = False
    full = _with_feed(spec, {**feed, "input": sp_["files"],
                             "format": f"fixed:{sp_['record_bytes']}"})
    if "shuffle" in feed:
        full["feed"]["shuffle"] = feed["shuffle"]
    return run(spark, full, **kw), sp_


def train(spark: Any, df: Any, spec: Union[SpecLike, Callable[..., Any]], *, epochs: int = 1,
          spill_dir: Optional[Any] = None, keep_spill: bool = False,
          stream: Optional[bool] = None, ahead: int = 256 << 20, stall: float = 600.0,
          **kw: Any) -> Result:
    """Runs the job of spec (a loom.Spec or dict) with df as its feed's
    input, epochs times. df may be an RDD too: of bytes (a record each),
    or of rows of numbers, nested lists and numpy arrays flattened (a
    TensorFlowOnSpark program's (image, label) pairs), a column per number.
    spec may be a function, with args=, kwargs=, roles= or num_workers=,
    python=, files=, retries=, name= as for run(spark, fn): each task runs
    it (reading the feed with loom.Feed()) and the Result's values hold
    what each returned; a task's exception raises TaskError. Tasks read the records with loom.Feed() (Python)
    or loom_feed_next (C): a record is a row's columns in order, as spill()
    writes them; a spec's own feed keeps its shuffle and seed.

    Streamed (stream=None when the application has a task slot beyond the
    job's tasks; stream=True insists): the job starts at once, and a Spark
    job beside it writes df's partitions into the spill, each read by the
    job as soon as it is written whole (the first epoch follows the spill);
    later epochs replay the spill without Spark. With epochs=1 the feed
    removes each file once read, and a partition is computed only while
    the spill holds at most ahead bytes: back-pressure when the tasks read
    slower than Spark writes (a writer that sees nothing read for stall
    seconds fails the job). Otherwise (stream=False, or no free slot)
    spill(df) runs first, then the job.

    The spill (spill_dir, by default a new directory under the system's
    temporary directory, reached by the driver and every executor) is
    removed afterwards unless keep_spill. kw go to run(). The Result's
    spill is what spill() returned (its files: as written; a consumed
    spill's are gone), with streamed and (streamed) waited_s, the seconds
    Spark's writers waited for the tasks, and spill_s."""
    if epochs < 1:
        raise ValueError(f"loom.spark.train: epochs={epochs}: at least 1")
    fkw = _split_fn_kw(spec, kw, "loom.spark.train")
    df = _as_df(spark, df, "loom.spark.train")
    if callable(spec):
        with _fn_spec(spark, spec, env=kw.get("env"), **fkw) as fs:
            r = train(spark, df, fs, epochs=epochs, spill_dir=spill_dir, keep_spill=keep_spill,
                      stream=stream, ahead=ahead, stall=stall, **{**kw, "check": False})
        return _fn_outcome(r, kw.get("home"), kw.get("env"))
    d, made = _spill_dir(spill_dir)
    try:
        r, sp = _feed_run(spark, df, spec, d, {"epochs": epochs}, stream, ahead, stall,
                          epochs == 1 and not keep_spill, "loom.spark.train", kw)
        r.spill = sp  # type: ignore[attr-defined]
        return r
    finally:
        if not keep_spill:
            _drop_spill(d, made)


def inference(spark: Any, df: Any, spec: Union[SpecLike, Callable[..., Any]], *,
              spill_dir: Optional[Any] = None, stream: Optional[bool] = None,
              ahead: int = 256 << 20, stall: float = 600.0, **kw: Any) -> Any:
    """Runs the job of spec with df as its feed's input, once, in order (no
    shuffle), and returns a DataFrame of what the tasks wrote with
    loom.Feed().write (loom_feed_write), a row a line, column value: the
    feed commits each split's output exactly once, whatever failed and was
    retried, so each input row's result is there exactly once when the
    tasks write one line a record. The input streams beside the job as in
    train (stream, ahead, stall), each spilled file removed once read.

    The output is the caller's, and the only thing left afterwards (the
    returned DataFrame reads it; res.inputFiles() names its files, remove
    their directory when done): spill_dir/out with a spill_dir, else a new
    directory loom-inference-* under the system's temporary directory. The
    spill is removed (a spill directory loom made, whole). Raises
    JobFailed when the job fails (and then leaves no output directory it
    made). df may be an RDD and spec a function, as for train: a task's
    exception then raises TaskError."""
    import shutil
    import tempfile
    fkw = _split_fn_kw(spec, kw, "loom.spark.inference")
    df = _as_df(spark, df, "loom.spark.inference")
    if callable(spec):
        with _fn_spec(spark, spec, env=kw.get("env"), **fkw) as fs:
            try:
                return inference(spark, df, fs, spill_dir=spill_dir, stream=stream, ahead=ahead,
                                 stall=stall, **kw)
            except JobFailed as e:
                _fn_outcome(e.result, kw.get("home"), kw.get("env"))  # TaskError if a task raised
                raise
    d, made = _spill_dir(spill_dir)
    out = tempfile.mkdtemp(prefix="loom-inference-") if made else f"{d}/out"
    ok = False
    try:
        _feed_run(spark, df, spec, d, {"epochs": 1, "output": out, "shuffle": False}, stream,
                  ahead, stall, True, "loom.spark.inference", {**kw, "check": True})
        ok = True
    finally:
        _drop_spill(d, made)
        if made and not ok:
            shutil.rmtree(out, ignore_errors=True)
    return spark.read.text(f"{out}/part-*")
