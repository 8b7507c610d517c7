"""The spill of loom.spark: a DataFrame (or an RDD) written by Spark as
fixed-width records into a directory, local or hdfs://, that the job's
feed reads (`fixed:<bytes>`); the directory's lifetime. loom.spark's
train() and inference() use it; spill() is public as loom.spark.spill.
See loom/spark.py's docstring and docs/spark.md."""
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._find import binary, fs
from ._find import remote as _remote
from .cli import SpecLike
from .errors import CommandError

_shipped: Dict[Tuple[str, str], bool] = {}  # (application id, binary) already added

# ---- DataFrames in: the spill ---------------------------------------------------

def _fs(*args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
    """`loom fs ARGS` from the driver (FsError, a CommandError, on failure)."""
    return fs(*args, timeout=300, check=check)


def _ls(url: str) -> List[Tuple[str, int]]:
    """The (name, bytes) of the entries of the HDFS directory url."""
    out = []
    for line in _fs("ls", url).stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[4].isdigit():
            out.append((f[-1].rsplit("/", 1)[-1], int(f[4])))
    return out


def _writer(dirpath: str, want: int = 0, ahead: int = 0, stall: float = 600.0,
            fs: Tuple[str, str] = ("", "")) -> Callable[[Any], Any]:
    """The mapInArrow function that writes a partition's Arrow batches as
    fixed-width records (a closure Spark ships by value). want: the record
    width every row must have (0: any one). ahead > 0: before computing its
    partition, wait while the spill holds more than ahead bytes of part
    files (the job's feed removes each once read: feed.consume), failing
    when none went for stall seconds. dirpath may be an hdfs:// URL: each
    file is written locally, then put there with `loom fs put` (the binary
    fs, or its copy shipped with the application), which renames it into
    place whole."""

    def write_partition(batches: Any) -> Any:
        import json as _json
        import os as _os
        import subprocess as _sp
        import tempfile as _tf
        import time as _time

        import numpy as np
        import pyarrow as pa
        from pyspark import SparkFiles, TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId()
        remote = dirpath.startswith("hdfs://")
        final = f"{dirpath}/part-{part:05d}.rec"
        tmp = (_os.path.join(_tf.gettempdir(), f"loom-spill-{_os.getpid()}-{part:05d}-"
                             f"{ctx.taskAttemptId()}.tmp") if remote
               else _os.path.join(dirpath, f".part-{part:05d}-{ctx.taskAttemptId()}.tmp"))
        rows, width, f = 0, -1, None
        t0 = _time.monotonic()
        loom_bin = ""
        if remote:
            loom_bin = fs[0] if _os.access(fs[0], _os.X_OK) else SparkFiles.get(fs[1])

        def lfs(*args: str) -> Any:
            return _sp.run([loom_bin, "fs", *args], capture_output=True, text=True, timeout=300)

        def failed(r: Any, what: str) -> Exception:
            return RuntimeError(f"loom.spark: loom fs {what}: {r.stderr.strip()[:400]}")

        def spilled() -> int:
            n = 0
            if remote:
                r = lfs("ls", dirpath)
                if r.returncode:
                    raise failed(r, f"ls {dirpath}")
                for line in r.stdout.splitlines():
                    fl = line.split()
                    name = fl[-1].rsplit("/", 1)[-1] if fl else ""
                    if len(fl) >= 8 and fl[4].isdigit() and name.startswith("part-") and \
                            name.endswith(".rec"):
                        n += int(fl[4])
                return n
            with _os.scandir(dirpath) as it:
                for ent in it:
                    if ent.name.startswith("part-") and ent.name.endswith(".rec"):
                        try:
                            n += ent.stat().st_size
                        except OSError:  # read and removed meanwhile
                            pass
            return n

        def size_of(path: str) -> int:  # -1: absent
            if not remote:
                return _os.path.getsize(path) if _os.path.exists(path) else -1
            r = lfs("stat", path)
            if r.returncode == 1:
                return -1
            if r.returncode:
                raise failed(r, f"stat {path}")
            return int(_json.loads(r.stdout)["length"])

        # a partition published once is marked (its rows in .part-N.done,
        # which the feed's consume leaves): a retried Spark task never
        # writes it again, even once the feed has read and removed it
        marker = f"{dirpath}/.part-{part:05d}.done"

        def marked() -> int:  # its rows, or -1
            if remote:
                r = lfs("cat", marker)
                if r.returncode == 1:
                    return -1
                if r.returncode:
                    raise failed(r, f"cat {marker}")
                return int(r.stdout.strip() or 0)
            try:
                with open(marker) as mf:
                    return int(mf.read().strip() or 0)
            except FileNotFoundError:
                return -1

        def mark(n: int) -> None:
            mtmp = (_os.path.join(_tf.gettempdir(), f"loom-mark-{_os.getpid()}-{part:05d}")
                    if remote else f"{marker}.{ctx.taskAttemptId()}.tmp")
            with open(mtmp, "w") as mf:
                mf.write(str(n))
            if remote:
                try:
                    r = lfs("put", "-f", mtmp, marker)
                finally:
                    _os.unlink(mtmp)
                if r.returncode:
                    raise failed(r, f"put {marker}")
            else:
                _os.replace(mtmp, marker)

        def publish() -> None:  # tmp, whole, becomes final
            if not remote:
                _os.replace(tmp, final)
                return
            try:
                r = lfs("put", tmp, final)
            finally:
                _os.unlink(tmp)
            if r.returncode and size_of(final) < 0:  # (1 and there: another attempt's)
                raise failed(r, f"put {final}")

        # back-pressure: Spark computes this partition only once the job's
        # tasks have read the spill down to `ahead` bytes
        if ahead > 0:
            low, since = spilled(), _time.monotonic()
            while True:
                now = spilled()
                if now <= ahead:
                    break
                if now < low:
                    low, since = now, _time.monotonic()
                elif _time.monotonic() - since > stall:
                    raise RuntimeError(
                        f"loom.spark: the job's tasks read none of the spill's {now} bytes for "
                        f"{stall:.0f} s (partition {part} waits to be written)")
                _time.sleep(0.25 if remote else 0.02)
        waited = _time.monotonic() - t0
        had = marked() if want else -1
        if had >= 0:
            # written whole by an earlier attempt of this Spark task, and
            # maybe read already: never twice
            for _ in batches:
                pass
            yield pa.RecordBatch.from_pydict(
                {"file": [final], "rows": [had], "width": [want], "waited": [waited]})
            return

        def columns(b: Any) -> Any:
            n = b.num_rows
            for i, field in enumerate(b.schema):
                a, t = b.column(i), field.type
                if a.null_count:
                    raise ValueError(f"loom.spark: column {field.name!r} has nulls: fixed-width "
                                     "records need a value in every row")
                if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
                    v = a.to_numpy(zero_copy_only=False)
                    v = v.astype(v.dtype.newbyteorder("<"), copy=False)
                    yield np.ascontiguousarray(v).view(np.uint8).reshape(n, -1)
                elif pa.types.is_binary(t) or pa.types.is_string(t):
                    off = np.frombuffer(a.buffers()[1], dtype=np.int32, count=n + 1,
                                        offset=a.offset * 4)
                    lens = np.diff(off)
                    if n and (lens != lens[0]).any():
                        raise ValueError(
                            f"loom.spark: column {field.name!r} holds values of "
                            f"{int(lens.min())} to {int(lens.max())} bytes: fixed-width records "
                            "need one length (pad them, or leave the column out)")
                    data = np.frombuffer(a.buffers()[2], dtype=np.uint8)
                    yield data[off[0]:off[-1]].reshape(n, int(lens[0]) if n else 0)
                elif pa.types.is_fixed_size_binary(t):
                    w = t.byte_width
                    data = np.frombuffer(a.buffers()[1], dtype=np.uint8)
                    yield data[a.offset * w:(a.offset + n) * w].reshape(n, w)
                else:
                    raise ValueError(f"loom.spark: column {field.name!r} is {t}: fixed-width "
                                     "records take numbers, booleans, and binary or string "
                                     "columns of one length")

        try:
            for b in batches:
                if b.num_rows == 0:
                    continue
                rec = np.concatenate(list(columns(b)), axis=1)
                if width >= 0 and rec.shape[1] != width:
                    raise ValueError(f"loom.spark: rows of {rec.shape[1]} and {width} bytes in "
                                     f"one partition: fixed-width records need one width")
                width = rec.shape[1]
                if want and width != want:
                    raise ValueError(f"loom.spark: a row of {width} bytes where the first row "
                                     f"had {want}: fixed-width records need one width (a binary "
                                     "or string column of varying length?)")
                if f is None:
                    f = open(tmp, "wb")
                f.write(np.ascontiguousarray(rec).data)
                rows += b.num_rows
            if f is not None:
                f.close()
                f = None
                publish()  # whole or absent: a retried task rewrites it
                if want:
                    mark(rows)
        finally:
            if f is not None:
                f.close()
                _os.unlink(tmp)
        yield pa.RecordBatch.from_pydict(
            {"file": [final if rows else ""], "rows": [rows], "width": [max(width, 0)],
             "waited": [waited]})

    return write_partition


_WRITTEN = "file string, rows long, width long, waited double"


def spill(df: Any, path: Any) -> Dict[str, Any]:
    """Writes df as fixed-width records into the directory path (made if
    missing; a path every executor and task reaches: one machine, a shared
    file system), one file a partition, part-NNNNN.rec. A record is a row's
    columns in order, each as its bytes: numbers little-endian at their
    width (a byte, short, int, long, float, double; a boolean one byte),
    binary and string columns raw, which must hold values of one length.
    Returns {"files", "rows", "record_bytes", "columns"}; a column that
    cannot be written so (nulls, unequal lengths, other types) fails the
    Spark job with a message that names it, before the loom job starts.
    path may be an hdfs:// URL (see _writer)."""
    d = _prepare(path)
    fs = _fs_bin(df) if _remote(d) else ("", "")
    parts = df.mapInArrow(_writer(d, fs=fs), _WRITTEN).collect()
    files = sorted(r["file"] for r in parts if r["file"])
    widths = {r["width"] for r in parts if r["rows"]}
    if len(widths) > 1:
        raise ValueError(f"loom.spark: partitions of {sorted(widths)} bytes a row: fixed-width "
                         "records need one width (a binary or string column of varying length?)")
    return {"files": files, "rows": sum(r["rows"] for r in parts),
            "record_bytes": widths.pop() if widths else 0,
            "columns": [f"{f.name}:{f.dataType.simpleString()}" for f in df.schema.fields]}


def _prepare(path: Any) -> str:
    """The spill directory path as a string, made if missing."""
    if isinstance(path, str) and _remote(path):
        _fs("mkdir", path)
        return path.rstrip("/")
    d = Path(os.fspath(path)).absolute()
    d.mkdir(parents=True, exist_ok=True)
    return str(d)


def _ship(sc: Any, exe: str) -> None:
    """Adds the loom binary to the application's files once, for the
    executors whose host has none."""
    if (sc.applicationId, exe) not in _shipped:
        sc.addFile(exe)
        _shipped[(sc.applicationId, exe)] = True


def _fs_bin(df: Any) -> Tuple[str, str]:
    """The loom binary as the writers find it (shipped to the executors)."""
    exe = binary()
    _ship(df.sparkSession.sparkContext, exe)
    return exe, os.path.basename(exe)


def _with_feed(spec: SpecLike, feed: Dict[str, Any]) -> Dict[str, Any]:
    from .spec import Spec
    if isinstance(spec, (str, os.PathLike)):
        raise TypeError("loom.spark.train and inference take the spec as a loom.Spec or a dict "
                        "(its feed is set from the DataFrame)")
    d = spec.to_dict() if isinstance(spec, Spec) else json.loads(json.dumps(dict(spec)))
    if d.get("feed"):
        keep = {k: v for k, v in d["feed"].items() if k in ("shuffle", "seed")}
        feed = {**feed, **keep}
    d["feed"] = feed
    return d


def _flat(row: Any) -> List[Any]:
    """A row's numbers in order, nested lists, tuples and numpy arrays
    flattened; anything else is a TypeError naming its type."""
    out: List[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, (bool, int, float)):
            out.append(v)
        elif hasattr(v, "tolist"):  # a numpy array or scalar
            walk(v.tolist())
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        else:
            raise TypeError(f"loom.spark: an RDD row holds a {type(v).__name__}: rows of "
                            "numbers (nested lists, tuples, numpy arrays) or of bytes make "
                            "fixed-width records")
    walk(row)
    return out


def _as_df(spark: Any, data: Any, what: str, first: Optional[List[Any]] = None) -> Any:
    """data as a DataFrame: a DataFrame as it is; an RDD of bytes as one
    binary column; an RDD of rows of numbers (tuples, lists, Rows, nested
    and numpy arrays flattened: TensorFlowOnSpark's (image, label) pairs)
    as a column per number, bool, long or double as in the first row.
    first: the RDD's take(1) where the caller has it already (one Spark
    job fewer)."""
    if hasattr(data, "schema") and hasattr(data, "sparkSession"):
        return data
    if not (hasattr(data, "mapPartitions") and hasattr(data, "context")):
        raise TypeError(f"{what}: data must be a DataFrame or an RDD, not "
                        f"{type(data).__name__}")
    from pyspark.sql import SparkSession
    from pyspark.sql.types import (BinaryType, BooleanType, DoubleType, LongType, StructField,
                                   StructType)
    ss = spark if hasattr(spark, "createDataFrame") else SparkSession(spark)
    if first is None:
        first = data.take(1)
    if not first:
        raise ValueError(f"{what}: the RDD has no rows")
    if isinstance(first[0], (bytes, bytearray)):
        schema = StructType([StructField("value", BinaryType(), False)])
        return ss.createDataFrame(data.map(lambda b: (bytearray(b),)), schema)
    kinds = [bool if isinstance(v, bool) else int if isinstance(v, int) else float
             for v in _flat(first[0])]
    types = {bool: BooleanType(), int: LongType(), float: DoubleType()}
    schema = StructType([StructField(f"_{i}", types[k], False) for i, k in enumerate(kinds)])

    def row(r: Any) -> Tuple[Any, ...]:
        vs = _flat(r)
        if len(vs) != len(kinds):
            raise ValueError(f"loom.spark: an RDD row has {len(vs)} numbers, the first "
                             f"{len(kinds)}: fixed-width records need the same in every row")
        return tuple(k(v) for k, v in zip(kinds, vs))
    return ss.createDataFrame(data.map(row), schema)


_FIXED = {"byte": 1, "short": 2, "integer": 4, "long": 8, "float": 4, "double": 8, "boolean": 1}


def _record_width(df: Any) -> int:
    """The bytes of a record of df, from its schema, and from its first row
    for binary and string columns (one small Spark job); 0 when df has no
    rows. A column of another type is a ValueError naming it."""
    var = []
    width = 0
    for f in df.schema.fields:
        t = f.dataType.typeName()
        if t in _FIXED:
            width += _FIXED[t]
        elif t in ("binary", "string"):
            var.append(f.name)
        else:
            raise ValueError(f"loom.spark: column {f.name!r} is {f.dataType.simpleString()}: "
                             "fixed-width records take numbers, booleans, and binary or string "
                             "columns of one length")
    if var or not df.schema.fields:
        from pyspark.sql import functions as F
        row = df.select([F.octet_length(F.col(c)).alias(f"_{i}") for i, c in enumerate(var)]
                        or [F.lit(0)]).first()
        if row is None:
            return 0
        if any(v is None for v in row):
            raise ValueError("loom.spark: the first row has nulls: fixed-width records need a "
                             "value in every row")
        width += sum(int(v) for v in row) if var else 0
    return width


def _put_text(path: str, text: str) -> None:
    """Writes a small file whole: renamed into place (put, on HDFS)."""
    import tempfile
    fd, tmp = tempfile.mkstemp(prefix="._DONE.", dir=None if _remote(path)
                               else os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if _remote(path):
            _fs("put", tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _spill_entries(d: str) -> List[str]:
    """The names in the spill directory d that a spill leaves."""
    if _remote(d):
        names = [n for n, _ in _ls(d)]
    else:
        names = os.listdir(d)
    return sorted(n for n in names if (n.startswith("part-") and n.endswith(".rec"))
                  or n == "_DONE" or n.startswith("._DONE.") or n.startswith(".part-"))


def _spill_dir(spill_dir: Optional[Any]) -> Tuple[str, bool]:
    import tempfile
    if spill_dir is None:
        return tempfile.mkdtemp(prefix="loom-spill-"), True
    d = _prepare(spill_dir)
    old = _spill_entries(d)
    if old:
        raise ValueError(f"loom.spark: spill_dir {d} holds an earlier spill ({old[0]}): "
                         "remove its part-*.rec and _DONE, or choose another directory")
    return d, False


def _drop_spill(d: str, made: bool) -> None:
    import shutil
    if made:
        shutil.rmtree(d, ignore_errors=True)
        return
    try:
        names = _spill_entries(d)
    except (OSError, CommandError, subprocess.SubprocessError):
        return
    for n in names:
        try:
            if _remote(d):
                _fs("rm", f"{d}/{n}", check=False)
            else:
                os.unlink(os.path.join(d, n))
        except (OSError, subprocess.SubprocessError):  # gone, or HDFS slow: best effort
            pass
