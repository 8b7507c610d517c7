"""TensorFlowOnSpark's TFNode on loom: DataFeed over loom's feed, and
hdfs_path. What TF 1 alone had (start_cluster_server, export_saved_model,
the module-level next_batch and batch_results) raises, saying what to use
instead."""
import getpass
import json
from typing import Any, List, Optional

_SCHEMES = ("adl://", "file://", "hdfs://", "oss://", "s3://", "s3a://", "s3n://", "swift://",
            "viewfs://", "wasb://")


def hdfs_path(ctx: Any, path: str) -> str:
    """path made absolute on the application's default filesystem, as
    TensorFlowOnSpark does: a path with a scheme as it is, an absolute one
    under defaultFS, a relative one under the user's HDFS home directory
    (or the driver's working directory on file://)."""
    if path.startswith(_SCHEMES):
        return path
    fs = ctx.defaultFS
    if path.startswith("/"):
        return fs + path
    if fs.startswith(("hdfs://", "viewfs://")):
        return f"{fs}/user/{getpass.getuser()}/{path}"
    if fs.startswith("file://"):
        return f"{fs}/{ctx.working_dir[1:]}/{path}"
    return f"{fs}/{path}"


def _gone(what: str, instead: str) -> Exception:
    return NotImplementedError(f"TFNode.{what}: TensorFlowOnSpark's TF 1 API, not in "
                               f"loom.compat.tensorflowonspark: {instead}")


def start_cluster_server(ctx: Any, num_gpus: int = 1, rdma: bool = False) -> Any:
    raise _gone("start_cluster_server", "TF 2's strategies read TF_CONFIG, which loom sets in "
                "every task (tf.distribute.MultiWorkerMirroredStrategy())")


def export_saved_model(*args: Any, **kw: Any) -> Any:
    raise _gone("export_saved_model", "use model.save() or tf.saved_model.save()")


def next_batch(*args: Any, **kw: Any) -> Any:
    raise _gone("next_batch", "use TFNode.DataFeed(ctx.mgr).next_batch(n)")


def batch_results(*args: Any, **kw: Any) -> Any:
    raise _gone("batch_results", "use TFNode.DataFeed(ctx.mgr, False).batch_results(results)")


def terminate(*args: Any, **kw: Any) -> Any:
    raise _gone("terminate", "use TFNode.DataFeed(ctx.mgr).terminate()")


class _Mgr:
    """ctx.mgr: what DataFeed needs of the node (TensorFlowOnSpark's
    TFManager): the layout of the fed rows and this task's loom feed."""

    def __init__(self, layout: Any) -> None:
        self.layout = layout
        self._feed: Any = None

    def feed(self) -> Any:
        if self.layout is None:
            raise RuntimeError("TFNode.DataFeed: this cluster runs with "
                               "InputMode.TENSORFLOW: no data is fed to it (use "
                               "input_mode=InputMode.SPARK and cluster.train(rdd))")
        if self._feed is None:
            import loom
            self._feed = loom.Feed()
        return self._feed

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None


def _jsonable(v: Any) -> Any:
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    raise TypeError(f"TFNode.DataFeed.batch_results: a {type(v).__name__} result: results go "
                    "back to the driver as JSON (numbers, strings, lists, dicts, numpy arrays)")


class DataFeed:
    """The rows cluster.train(rdd) / cluster.inference(rdd) feed, in this
    task: next_batch(n) gives up to n rows as the RDD held them (fewer at
    the end of the data; in inference mode a batch ends where a split of
    the input ends, so that batch_results' lines land in that split's
    output, committed exactly once); should_stop() is true once the data
    is over; terminate() stops reading (what is left goes to the other
    tasks). Epochs follow one another without a mark, as in
    TensorFlowOnSpark."""

    def __init__(self, mgr: Any, train_mode: bool = True, qname_in: str = "input",
                 qname_out: str = "output", input_mapping: Optional[Any] = None) -> None:
        if input_mapping is not None:
            raise ValueError("TFNode.DataFeed: input_mapping (TensorFlowOnSpark's Spark ML "
                             "pipeline, TFEstimator) is not honoured by loom.compat: leave it "
                             "out and split each row's columns in map_fun")
        if not isinstance(mgr, _Mgr):
            raise TypeError("TFNode.DataFeed: mgr must be the ctx.mgr map_fun was given")
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in, self.qname_out = qname_in, qname_out
        self.done_feeding = False

    def next_batch(self, batch_size: int) -> List[Any]:
        import loom
        feed = self.mgr.feed()
        out: List[Any] = []
        while len(out) < batch_size and not self.done_feeding:
            r = feed.read_view(batch_size - len(out))
            if r is None:
                self.done_feeding = True
                break
            if r is loom.EPOCH:
                continue
            out.extend(self.mgr.layout.rows(*r))
            if not self.train_mode and out:
                break  # the split's results, then the next split
        return out

    def should_stop(self) -> bool:
        return self.done_feeding

    def batch_results(self, results: List[Any]) -> None:
        """One JSON line per result into the output of the split the last
        batch came from: cluster.inference returns them, one per input row
        when map_fun gives one result per row read."""
        feed = self.mgr.feed()
        feed.write("".join(json.dumps(r, default=_jsonable) + "\n" for r in results))

    def terminate(self) -> None:
        self.done_feeding = True
        self.mgr.close()
