"""TensorFlowOnSpark's TFCluster on loom.

run() maps the TensorFlowOnSpark cluster onto a loom job's roles, in the
executors of sc's application (loom.spark): num_ps tasks of role ps, one
of role master_node (e.g. "chief") when given, one evaluator with
eval_node, and workers for the rest of num_executors. Each task runs
map_fun(tf_args, ctx) with TF_CONFIG set. InputMode.TENSORFLOW starts the
job at once (in a thread of the driver); shutdown() waits for it and
raises what a task raised (loom.TaskError, with the remote traceback).
InputMode.SPARK starts nothing: each train(rdd) and inference(rdd) runs
the job over that data (loom.spark.train / inference), so map_fun runs
once per call; a task's exception raises there.

Refused by name, before anything starts: tensorboard=True,
driver_ps_nodes=True, Spark Streaming (a DStream, ssc), eval_node with
InputMode.SPARK (as TensorFlowOnSpark), queues other than input, output and
error."""
import json
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...spec import Role
from .TFNode import _Mgr, hdfs_path


class InputMode:
    """How data reaches map_fun: TENSORFLOW, map_fun reads it itself;
    SPARK, cluster.train(rdd) / inference(rdd) feed it (TFNode.DataFeed)."""
    TENSORFLOW = 0
    SPARK = 1


class TFNodeContext:
    """What map_fun is given as ctx: this node in the cluster."""

    def __init__(self, executor_id: int = 0, job_name: str = "", task_index: int = 0,
                 cluster_spec: Optional[Dict[str, List[str]]] = None,
                 defaultFS: str = "file://", working_dir: str = ".", mgr: Any = None,
                 num_workers: int = 0) -> None:
        self.executor_id = self.worker_num = executor_id
        self.job_name = job_name
        self.task_index = task_index
        self.cluster_spec = cluster_spec or {}
        self.defaultFS = defaultFS
        self.working_dir = working_dir
        self.mgr = mgr
        self.num_workers = num_workers
        self.tmp_socket = None

    def absolute_path(self, path: str) -> str:
        return hdfs_path(self, path)

    def get_data_feed(self, train_mode: bool = True, qname_in: str = "input",
                      qname_out: str = "output", input_mapping: Optional[Any] = None) -> Any:
        from .TFNode import DataFeed
        return DataFeed(self.mgr, train_mode, qname_in, qname_out, input_mapping)

    def release_port(self) -> None:
        """Nothing to release: loom hands each task its port in TF_CONFIG."""

    def start_cluster_server(self, num_gpus: int = 1, rdma: bool = False) -> Any:
        from .TFNode import start_cluster_server
        return start_cluster_server(self, num_gpus, rdma)

    def export_saved_model(self, *args: Any, **kw: Any) -> Any:
        from .TFNode import export_saved_model
        return export_saved_model(*args, **kw)


def _node(map_fun: Callable[..., Any], tf_args: Any, meta: Dict[str, Any],
          layout: Any) -> Any:
    """What each task runs: map_fun(tf_args, ctx)."""
    import loom
    t = loom.task()
    first = 0
    for role, n in meta["order"]:
        if role == t.role:
            break
        first += n
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or t.cluster
    except ValueError:
        cluster = t.cluster
    mgr = _Mgr(layout)
    if meta.get("parallel"):  # TFParallel: each instance alone, as TensorFlowOnSpark's
        os.environ.pop("TF_CONFIG", None)
        return map_fun(tf_args, TFNodeContext(executor_id=t.index, defaultFS=meta["default_fs"],
                                              working_dir=meta["working_dir"],
                                              num_workers=meta["num_workers"]))
    ctx = TFNodeContext(executor_id=first + t.index, job_name=t.role, task_index=t.index,
                        cluster_spec=cluster, defaultFS=meta["default_fs"],
                        working_dir=meta["working_dir"], mgr=mgr,
                        num_workers=meta["num_workers"])
    try:
        return map_fun(tf_args, ctx)
    finally:
        mgr.close()


def _refuse(what: str, why: str) -> Exception:
    return ValueError(f"TFCluster.{what}: {why}")


class TFCluster:
    """The cluster TFCluster.run returned."""

    def __init__(self, sc: Any, map_fun: Callable[..., Any], tf_args: Any,
                 roles: Dict[str, Role], meta: Dict[str, Any], input_mode: int,
                 wait_executors: float, timeout: Optional[float]) -> None:
        self.sc = sc
        self.map_fun, self.tf_args = map_fun, tf_args
        self.roles, self.meta = roles, meta
        self.input_mode = input_mode
        self.num_executors = sum(n for _, n in meta["order"])
        self.defaultFS, self.working_dir = meta["default_fs"], meta["working_dir"]
        self.queues = ["input", "output", "error"]
        self.results: List[Any] = []  # each job's loom.Result (its .values: each task's return)
        self._wait = wait_executors
        self._timeout = timeout
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def _kw(self, layout: Any) -> Dict[str, Any]:
        return dict(args=(self.map_fun, self.tf_args, self.meta, layout), roles=self.roles,
                    wait_executors=self._wait, timeout=self._timeout, name="tfos")

    def _start(self) -> None:
        from ... import spark

        def job() -> None:
            try:
                self.results.append(spark.run(self.sc, _node, **self._kw(None)))
            except BaseException as e:  # raised again by shutdown()
                self._error = e
        self._thread = threading.Thread(target=job, name="loom-tfos", daemon=True)
        self._thread.start()

    def _data(self, rdd: Any, what: str) -> Tuple[Any, Any]:
        from ._rows import Layout
        if self.input_mode != InputMode.SPARK:
            raise _refuse(what, "needs input_mode=InputMode.SPARK (the cluster runs with "
                          "InputMode.TENSORFLOW: map_fun reads its own data)")
        if type(rdd).__name__ == "DStream":
            raise _refuse(what, "a DStream (Spark Streaming) is not fed by loom.compat: "
                          "feed each RDD of it, or use loom.spark.train")
        first = rdd.take(1)
        if not first:
            raise _refuse(what, "the RDD has no rows")
        # the DataFrame the feed reads, made from the row already taken
        from ..._spill import _as_df
        return _as_df(self.sc, rdd, what, first=first), Layout(first[0])

    def train(self, dataRDD: Any, num_epochs: int = 0, feed_timeout: float = 600,
              qname: str = "input") -> None:
        """Runs map_fun over dataRDD, num_epochs times (0: 10, as
        TensorFlowOnSpark); a task that reads nothing for feed_timeout
        seconds while Spark writes fails the job."""
        from ... import spark
        if num_epochs < 0:
            raise _refuse("train", f"num_epochs={num_epochs}: at least 0")
        rdd, layout = self._data(dataRDD, "train")
        self.results.append(spark.train(self.sc, rdd, _node, epochs=num_epochs or 10,
                                        stall=float(feed_timeout), **self._kw(layout)))

    def inference(self, dataRDD: Any, feed_timeout: float = 600, qname: str = "input") -> Any:
        """Runs map_fun over dataRDD once, in order, and returns an RDD of
        what it gave DataFeed.batch_results (each input row's results
        exactly once, JSON values: tuples come back as lists). Unlike
        TensorFlowOnSpark's the job runs now, not when the RDD is used."""
        from ... import spark
        rdd, layout = self._data(dataRDD, "inference")
        from pyspark.sql import SparkSession
        session = SparkSession(self.sc)  # the DataFrame of results is read through one
        df = spark.inference(session, rdd, _node, stall=float(feed_timeout), **self._kw(layout))
        return df.rdd.map(lambda row: json.loads(row.value))

    def shutdown(self, ssc: Any = None, grace_secs: int = 0, timeout: int = 259200) -> None:
        """Waits for the job InputMode.TENSORFLOW started (at most timeout
        seconds: then TimeoutError) and raises what it raised."""
        if ssc is not None:
            raise _refuse("shutdown", "ssc (Spark Streaming) is not supported by loom.compat")
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"TFCluster.shutdown: the cluster's job still runs after "
                                   f"{timeout} s")
            self._thread = None
        if self._error is not None:
            e, self._error = self._error, None
            raise e

    def tensorboard_url(self) -> Optional[str]:
        """None: loom.compat starts no TensorBoard (tensorboard=True is
        refused; a loom spec's tensorboard role serves one)."""
        return None


def _default_fs(sc: Any) -> str:
    try:
        fs = str(sc._jsc.hadoopConfiguration().get("fs.defaultFS") or "file:///")
    except Exception:
        fs = "file:///"
    return fs[:-1] if fs.startswith("file://") and len(fs) > 7 and fs.endswith("/") else fs


def run(sc: Any, map_fun: Callable[..., Any], tf_args: Any, num_executors: int, num_ps: int,
        tensorboard: bool = False, input_mode: int = InputMode.TENSORFLOW,
        log_dir: Optional[str] = None, driver_ps_nodes: bool = False,
        master_node: Optional[str] = None, reservation_timeout: float = 600,
        queues: Optional[List[str]] = None, eval_node: bool = False,
        release_port: bool = True) -> TFCluster:
    """The cluster of num_executors nodes running map_fun(tf_args, ctx):
    see the module's text."""
    sc = getattr(sc, "sparkContext", sc)
    if tensorboard:
        raise _refuse("run", "tensorboard=True is not honoured by loom.compat: add a "
                      "tensorboard role to a loom spec (docs/summaries.md)")
    if driver_ps_nodes:
        raise _refuse("run", "driver_ps_nodes=True is not honoured by loom.compat: ps tasks "
                      "run in executors like the others")
    if input_mode not in (InputMode.TENSORFLOW, InputMode.SPARK):
        raise _refuse("run", f"input_mode={input_mode!r}: InputMode.TENSORFLOW or "
                      "InputMode.SPARK")
    if eval_node and input_mode == InputMode.SPARK:
        raise _refuse("run", "eval_node=True needs InputMode.TENSORFLOW (as in "
                      "TensorFlowOnSpark)")
    bad = [q for q in (queues or []) if q not in ("input", "output", "error")]
    if bad:
        raise _refuse("run", f"queues {bad}: loom.compat feeds the input queue only")
    if not 0 <= num_ps < num_executors:
        raise _refuse("run", f"num_ps={num_ps} with num_executors={num_executors}: num_ps must "
                      "be less than num_executors")
    order: List[Tuple[str, int]] = []
    if num_ps:
        order.append(("ps", num_ps))
    if master_node:
        order.append((master_node, 1))
    workers = num_executors - num_ps - (1 if master_node else 0) - (1 if eval_node else 0)
    if workers < 0:
        raise _refuse("run", f"num_executors={num_executors} leaves no node for the "
                      f"{'master_node and ' if master_node else ''}evaluator")
    if workers:
        order.append(("worker", workers))
    if eval_node:
        order.append(("evaluator", 1))
    roles = {r: Role(instances=n) for r, n in order}
    meta = {"order": order, "default_fs": _default_fs(sc), "working_dir": os.getcwd(),
            "num_workers": workers + (1 if master_node else 0), "log_dir": log_dir}
    cluster = TFCluster(sc, map_fun, tf_args, roles, meta, input_mode,
                        float(reservation_timeout), None)
    if input_mode == InputMode.TENSORFLOW:
        cluster._start()
    return cluster
