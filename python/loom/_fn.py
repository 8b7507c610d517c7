"""The task side of loom.run(fn): `python -m loom._fn loom-fn.pkl`, the
command of every task of a job that loom.run(fn) generated.

It loads (fn, args, kwargs) from the file the spec's `files` placed in
the task's working directory (cloudpickle: a function defined in __main__
or closing over local variables comes by value), calls fn(*args,
**kwargs), and sends the return value, pickled, to the coordinator as
events (`loom_fn_result`, base64 parts of at most PART bytes each), which
the caller reads from the job's event log when the job has ended. An
exception (in fn, in loading it, in pickling its value) is sent as a
`loom_fn_error` event with the traceback text, and the task exits 1, so
the job fails fast as for a command. The caller (loom.functions) turns
those events into Result.values or a TaskError."""
import base64
import os
import sys
import traceback
from typing import Any, Dict, Optional

EXIT_FAILED = 1
PART = 512 << 10  # raw bytes per result event (well under LOOM_MAX_FRAME)


def key() -> str:
    """This process's key in Result.values: the task ("worker:1"), and
    "/local rank" when the role runs several processes a task."""
    task = os.environ.get("LOOM_TASK") or "{}:{}".format(os.environ.get("LOOM_ROLE", "?"),
                                                         os.environ.get("LOOM_INDEX", "?"))
    if int(os.environ.get("LOCAL_WORLD_SIZE") or 1) > 1:
        return f"{task}/{os.environ.get('LOCAL_RANK', '0')}"
    return task


def _error(stage: str, e: BaseException, tb: str, module: Optional[str] = None) -> Dict[str, Any]:
    return {"key": key(), "stage": stage, "type": type(e).__name__, "message": str(e),
            "traceback": tb, "module": module, "python": sys.executable}


def main(argv: Any = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else "loom-fn.pkl"
    # on Spark the pickle is a file of the application (SparkContext.addFile)
    # in SparkFiles' directory, which the Spark task names
    spark_files = os.environ.get("LOOM_SPARK_FILES")
    if not os.path.exists(path) and spark_files:
        path = os.path.join(spark_files, os.path.basename(path))
    from .core import Loom  # libloom: fails with NotFound (and exit 1) if it cannot be found
    with Loom() as lm:
        def fail(d: Dict[str, Any]) -> int:
            lm.event("loom_fn_error", **d)
            sys.stderr.write(d["traceback"])
            sys.stderr.flush()
            return EXIT_FAILED

        try:
            import pickle
            with open(path, "rb") as f:
                head = pickle.load(f)
                want = tuple(head.get("python") or ())
                if want and want != tuple(sys.version_info[:2]):
                    raise RuntimeError(
                        "the function was pickled by Python {} ({}) and this task runs Python {} "
                        "({}): cloudpickle needs the same version on both sides (loom.run's "
                        "python= names the tasks' interpreter)".format(
                            ".".join(map(str, want)), head.get("caller"),
                            ".".join(map(str, sys.version_info[:2])), sys.executable))
                try:
                    import cloudpickle
                except ImportError:  # a Spark executor: pyspark carries a copy
                    try:
                        from pyspark import cloudpickle
                    except ImportError:  # neither: the module to install is cloudpickle
                        raise ModuleNotFoundError("No module named 'cloudpickle'",
                                                  name="cloudpickle") from None
                fn, args, kwargs = cloudpickle.load(f)
        except ModuleNotFoundError as e:
            return fail(_error("load", e, traceback.format_exc(), e.name))
        except Exception as e:
            return fail(_error("load", e, traceback.format_exc()))
        try:
            value = fn(*args, **kwargs)
        except Exception as e:  # the traceback from fn's frame on: this module's is noise
            tb = e.__traceback__.tb_next if e.__traceback__ else None
            return fail(_error("call", e, "".join(traceback.format_exception(type(e), e, tb))))
        try:
            data = cloudpickle.dumps(value)
        except Exception as e:
            return fail(_error("result", e, traceback.format_exc()))
        parts = max(1, -(-len(data) // PART))
        for i in range(parts):
            chunk = base64.b64encode(data[i * PART:(i + 1) * PART]).decode()
            lm.event("loom_fn_result", key=key(), part=i, parts=parts, data=chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
