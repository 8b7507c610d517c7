"""A Jupyter notebook as its user runs it: nbclient executes its cells in a
kernel (ipykernel, in the Spark environment's Python, which has pyspark);
the cells define a training function and call loom.run(fn) on the local
backend and loom.spark.run in a local Spark. Checked from the executed
notebook's outputs: the values, the tasks' live [role:index] lines in the
cell's output, and a task's exception raised in the cell as loom.TaskError
with the remote traceback (issue 33, item 7)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import LIBLOOM, LOOM, ROOT, SANITIZED, pylib_env

SPARK_PYTHON = Path(os.environ.get("LOOM_SPARK_PYTHON", ROOT / ".venv-spark" / "bin" / "python"))

# Builds the notebook from the cells in argv[1] (JSON), executes it with
# nbclient (errors recorded in the cells, as Jupyter shows them), writes it
# to argv[2] and prints each cell's outputs as one JSON line.
RUNNER = r"""
import json, sys
import nbformat
from nbclient import NotebookClient

nb = nbformat.v4.new_notebook()
nb.cells = [nbformat.v4.new_code_cell(src) for src in json.loads(sys.argv[1])]
NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
nbformat.write(nb, sys.argv[2])
print("OUTPUTS " + json.dumps([c.get("outputs", []) for c in nb.cells]))
"""

CELLS = [
    """\
import json, os, loom

def train(x):
    print(f"training on {os.environ['LOOM_TASK']}", flush=True)
    return {"task": os.environ["LOOM_TASK"], "y": 2 * x}
""",
    """\
r = loom.run(train, args=(21,), num_workers=2, echo=True, timeout=120)
print("VALUES", json.dumps(r.values, sort_keys=True))
""",
    """\
def boom():
    raise ValueError("from the notebook")

loom.run(boom, timeout=120)
""",
    """\
import loom.spark
from pyspark.sql import SparkSession
fast = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
spark = (SparkSession.builder.master("local[2]").appName("notebook")
         .config("spark.ui.enabled", "false").config("spark.driver.extraJavaOptions", fast)
         .getOrCreate())
try:
    s = loom.spark.run(spark, train, args=(5,), num_workers=2, timeout=180)
    print("SPARK", json.dumps(s.values, sort_keys=True))
finally:
    spark.stop()
""",
]


def text(outputs):
    """The stream text of a cell's outputs."""
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


@pytest.mark.skipif(not SPARK_PYTHON.exists(), reason=f"no Spark environment at {SPARK_PYTHON}: "
                    "run scripts/setup-spark.sh")
@pytest.mark.skipif(SANITIZED, reason="a Spark driver in a notebook kernel: runs in the normal "
                    "pass (a JVM under the ASan runtime's preload hangs; loom.run(fn)'s C paths "
                    "run under ASan in test_functions)")
def test_a_notebook_runs_functions_on_loom_and_on_spark(loom):
    from test_spark import spark_env
    runner = loom.tmp / "runner.py"
    runner.write_text(RUNNER)
    e = dict(spark_env(), LOOM_HOME=str(loom.home), PYTHONPATH=str(ROOT / "python"),
             LOOM_BIN=str(LOOM), LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
    r = subprocess.run([str(SPARK_PYTHON), str(runner), json.dumps(CELLS),
                        str(loom.tmp / "run.ipynb")], capture_output=True, text=True, env=e,
                       cwd=loom.tmp, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    outs = json.loads(r.stdout.strip().splitlines()[-1].split(" ", 1)[1])
    assert [o for o in outs[0]] == [], outs[0]  # the definition cell prints nothing
    # loom.run: the tasks' lines as they came, then the values
    live = text(outs[1])
    for t in ("worker:0", "worker:1"):
        assert f"[{t}] training on {t}\n" in live, live
    values = json.loads(live.split("VALUES ", 1)[1])
    assert values == {"worker:0": {"task": "worker:0", "y": 42},
                      "worker:1": {"task": "worker:1", "y": 42}}, values
    assert live.index("[worker:0] training") < live.index("VALUES"), live
    # the task's exception, raised in the cell, with the remote traceback
    err = [o for o in outs[2] if o.get("output_type") == "error"]
    assert len(err) == 1, outs[2]
    assert err[0]["ename"] == "TaskError", err[0]
    ev = err[0]["evalue"]
    assert ev.startswith("worker:0 raised ValueError: from the notebook"), ev
    assert "worker:0's traceback (job boom-" in ev and ", in boom" in ev, ev
    assert "ValueError: from the notebook" in ev.split("traceback", 1)[1], ev
    # loom.spark.run from the same kernel, the function of a cell
    spark = text(outs[3])
    assert not [o for o in outs[3] if o.get("output_type") == "error"], outs[3]
    values = json.loads(spark.split("SPARK ", 1)[1].splitlines()[0])
    assert values == {"worker:0": {"task": "worker:0", "y": 10},
                      "worker:1": {"task": "worker:1", "y": 10}}, spark
    assert "[worker:0] training on worker:0" in spark, spark  # loom.spark echoes by default
    # the executed notebook is a notebook Jupyter opens
    nb = json.loads((loom.tmp / "run.ipynb").read_text())
    assert nb["nbformat"] == 4 and len(nb["cells"]) == len(CELLS), nb.keys()
