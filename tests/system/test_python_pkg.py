"""The `loom` Python package (python/): `pip install` into a fresh virtual
environment, offline; loom.run/submit/status/logs/events/kill against real
jobs; specs as loom.Spec/loom.Role checked by the C parser with the CLI's
exact messages; loom.task() inside a task; NotFound when there is no loom;
the old PYTHONPATH=python use."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, LIBLOOM, LOOM, ROOT, pylib_env

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A virtual environment with the package installed from a copy of
    python/ (so the install records a source tree without a build, and
    pip's in-tree build leaves nothing in this checkout). Offline:
    --no-index --no-build-isolation, setuptools and wheel from the system
    (--system-site-packages; Debian's venv has setuptools but not wheel)."""
    d = tmp_path_factory.mktemp("pyvenv")
    src = d / "src" / "python"
    shutil.copytree(ROOT / "python", src, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "requirements-*.txt"))
    r = subprocess.run([PY, "-m", "venv", "--system-site-packages", str(d / "venv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    py = d / "venv" / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index",
                        "--no-build-isolation", str(src)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(py), "-c", "import loom, os; print(loom.__file__)"],
                       capture_output=True, text=True, cwd=d, timeout=30)
    assert r.returncode == 0 and "/venv/lib/" in r.stdout, r.stdout + r.stderr
    return py, d / "src"


def vpy(py, code, loom, env=None, **kw):
    """Runs code in the venv's interpreter with the build under test named
    by LOOM_BIN / LOOM_LIBRARY (unless env overrides them); its stdout's
    last line as JSON."""
    e = dict(loom.env, LOOM_BIN=str(LOOM), LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
    e.pop("PYTHONPATH", None)
    e.update(env or {})
    e = {k: v for k, v in e.items() if v is not None}
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True, env=e,
                       cwd=loom.tmp, timeout=60, **kw)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_run_spec_objects_task_sees_itself(venv, loom):
    py, _ = venv
    out = vpy(py, f"""
import json, loom
show = ("import loom, json; t = loom.task(); l = loom.Loom(); n = l.kv_add('seen'); "
        "l.metric('x', 1, 0.5); l.close(); "
        "print('TASK', json.dumps([t.role, t.index, t.rank, t.world_size, t.task, "
        "sorted(t.cluster), len(t.cluster['worker']), t.job_id]))")
spec = loom.Spec(name="pyjob", roles={{
    "worker": loom.Role(instances=2, vcores=1, memory="512MiB", command=[{str(py)!r}, "-c", show]),
    "chief": {{"command": "echo chief $LOOM_RANK"}}}})
r = loom.run(spec, timeout=60)
print(json.dumps([r.ok, r.state, r.exit_code, r.job_id, str(r.job_dir), r.stdout]))
""", loom)
    ok, state, code, job, job_dir, stdout = out
    assert (ok, state, code) == (True, "succeeded", 0), stdout
    assert Path(job_dir) == loom.job_dir() and job_dir.endswith("/" + job)
    seen = sorted(json.loads(l.split("TASK ", 1)[1]) for l in stdout.splitlines() if "TASK " in l)
    # ranks: chief first, then the workers
    assert seen == [["worker", 0, 1, 3, "worker:0", ["chief", "worker"], 2, job],
                    ["worker", 1, 2, 3, "worker:1", ["chief", "worker"], 2, job]], stdout
    assert "[chief:0] chief 0" in stdout
    assert loom.state()["state"] == "succeeded"


def test_bad_specs_raise_the_clis_message(venv, loom):
    py, _ = venv
    bad = loom.spec("name: bad\nroles:\n  worker:\n    comand: true\n", "bad.yaml")
    cli = loom.run("run", bad)
    assert cli.returncode == 2 and "did you mean 'command'" in cli.stderr, cli.stderr
    out = vpy(py, f"""
import json, loom
res = []
for spec in ({str(bad)!r}, loom.Spec(name="zero", roles={{"worker": loom.Role(instances=0,
                                                                          command="true")}})):
    try:
        loom.run(spec)
        res.append(None)
    except loom.SpecError as e:
        res.append([e.message, str(e), e.exit_code, isinstance(e, loom.LoomError)])
res.append(loom.Spec(name="zero", roles={{"worker": loom.Role(instances=0, command="true")}}
                     ).to_json())
print(json.dumps(res))
""", loom)
    (msg, text, code, base), (msg2, _, code2, _), zero_json = out
    assert msg == text == cli.stderr.rstrip("\n") and code == 2 and base
    # the Spec's JSON given to the CLI: the same message but for the file's path
    p = loom.spec(zero_json, "zero.json")
    cli2 = loom.run("run", p)
    assert cli2.returncode == 2 == code2
    m = re.match(r"loom: (\S+/zero\.json):6:20: roles\.worker\.instances must be", msg2)
    assert m, msg2
    assert msg2 == cli2.stderr.rstrip("\n").replace(str(p), m[1])
    assert not loom.jobs()


def test_submit_status_logs_events_kill(venv, loom):
    py, _ = venv
    out = vpy(py, """
import json, time, loom
job = loom.submit(loom.Spec(name="sleepy", roles={"worker": loom.Role(
    command="echo up at $LOOM_TASK; exec sleep 60")}))
end = time.time() + 20
while time.time() < end and ("up at worker:0" not in loom.logs(job, "worker:0") or
                             loom.status(job)["state"] != "running"):
    time.sleep(0.1)
st = loom.status(job)
last = loom.status()["job"]
log = loom.logs(job, task="worker:0")
loom.kill(job)
after = loom.status(job[:10])
ev = [e["event"] for e in loom.events(job)]
try:
    loom.kill("no-such-job")
    err = None
except loom.CommandError as e:
    err = [type(e).__name__, e.exit_code, e.message]
print(json.dumps([job, st["state"], [t["state"] for t in st["tasks"]], last, log,
                  after["state"], ev, err]))
""", loom)
    job, state, tasks, last, log, after, ev, err = out
    assert state == "running" and tasks == ["running"] and last == job
    assert "up at worker:0" in log
    assert after == "killed" and loom.state()["state"] == "killed"
    assert ev[0] == "job_started" and "kill_requested" in ev and ev[-1] == "job_finished"
    cli = loom.run("kill", "no-such-job")
    assert err == ["SpecError", cli.returncode, cli.stderr.rstrip("\n")], err


def test_not_found_and_where_it_looks(venv, loom):
    py, src = venv
    code = """
import json, loom
res = []
for f in (loom.binary, loom.library):
    try:
        res.append(["found", f()])
    except loom.NotFound as e:
        res.append(["NotFound", str(e), isinstance(e, ImportError)])
try:
    loom.Feed
    res.append(None)
except ImportError as e:
    res.append(type(e).__name__)
try:
    loom.task()
except loom.NotInTask as e:
    res.append("NotInTask")
print(json.dumps(res))
"""
    out = vpy(py, code, loom, env={"LOOM_BIN": "/nowhere/loom", "LOOM_LIBRARY": "/nowhere/l.so"})
    assert out[0][0] == "NotFound" and "LOOM_BIN=/nowhere/loom" in out[0][1] and out[0][2]
    assert out[1][0] == "NotFound" and "LOOM_LIBRARY=/nowhere/l.so" in out[1][1]
    assert out[2:] == ["NotFound", "NotInTask"]
    # nothing set, no loom on PATH, the source tree installed from has no build
    bare = {"LOOM_BIN": None, "LOOM_LIBRARY": None, "LOOM_LIB": None, "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": None}
    if shutil.which("loom", path="/usr/bin:/bin") is None:
        out = vpy(py, code, loom, env=bare)
        assert out[0][0] == "NotFound", out
        assert f"{src}/build/loom" in out[0][1] and "LOOM_BIN" in out[0][1]
        assert "cmake --build build" in out[0][1]
    # ... and once it has one, the installed package finds it
    (src / "build").symlink_to(BUILD)
    try:
        out = vpy(py, code, loom, env=bare)
    finally:
        (src / "build").unlink()
    assert out[:2] == [["found", f"{src}/build/loom"], ["found", f"{src}/build/libloom.so"]]


def test_plain_python3_from_the_source_tree(loom):
    # the old way: PYTHONPATH=python, the build found beside it
    e = dict(loom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM), **pylib_env())
    e.pop("LOOM_LIBRARY", None)
    r = subprocess.run([PY, "-c", """
import json, loom, loom.feed
from loom import Loom, Feed, LoomError, END, EPOCH
r = loom.run(loom.Spec(name="plain", roles={"w": loom.Role(command=["true"])}))
print(json.dumps([r.ok, loom.library(), END is None, repr(EPOCH), LoomError(-1, "x").name]))
"""], capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode == 0, r.stderr
    ok, lib, end, epoch, name = json.loads(r.stdout.splitlines()[-1])
    assert ok and end and epoch == "loom.EPOCH" and name.startswith("LOOM_E")
    if BUILD == ROOT / "build":
        assert lib == str(ROOT / "build" / "libloom.so")


def test_a_process_copies_loom_py_once_while_its_sources_stay(loom, tmp_path):
    """loom.run(fn) off this host ships loom-py (loom and the caller's
    modules): a process builds and hashes that tree once while its sources
    are unchanged (a notebook runs job after job); the next ship names the
    same cached archive without copying anything, and a changed module of
    the caller's makes a new tree and a new archive."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "helpers.py").write_text("X = 1\n")
    e = dict(loom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
             LOOM_HOME=str(tmp_path / "home"), **pylib_env())
    e.pop("LOOM_LIBRARY", None)
    r = subprocess.run([PY, "-c", f"""
import json, os, tempfile
from loom import pyenv
built = []
real = pyenv.own_tree
def counting(dst, caller_dir, sites):
    built.append(dst)
    real(dst, caller_dir, sites)
pyenv.own_tree = counting
def ship():
    with tempfile.TemporaryDirectory() as tmp:
        s = pyenv.ship(None, "slurm", dict(os.environ), tmp, {str(app)!r})
        return [x for x in s.shipped if x["what"] == "modules"][0]
first, second = ship(), ship()
n2 = len(built)
with open({str(app / "helpers.py")!r}, "a") as f:
    f.write("Y = 2\\n")
third = ship()
print(json.dumps([first, second, third, n2, len(built)]))
"""], capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    first, second, third, n2, n3 = json.loads(r.stdout.splitlines()[-1])
    assert n2 == 1 and n3 == 2, (n2, n3)  # once, then once more for the change
    assert first["packed"] and not second["packed"], (first, second)
    assert second["url"] == first["url"] and os.path.isfile(first["url"]), (first, second)
    assert third["packed"] and third["url"] != first["url"], (first, third)
