"""The wheel (scripts/wheel.sh): the `loom` package with the self-contained
binary and libloom.so inside, `pip install`ed offline into a fresh venv,
gives everything: the `loom` console script (as on a stock node: hidden.py)
and loom.run() run a job with PATH=/usr/bin:/bin, from a directory outside
the checkout, with no LOOM_BIN, no build and no checkout on any path; the
console script passes a failed job's exit status on; loom.binary() and
loom.library() are the wheel's copies in the venv, the tasks' libloom and
agent too. The wheel is made from the build under test (scripts/wheel.sh
--from: nothing is compiled again)."""
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import hidden
from conftest import BUILD, ROOT, SANITIZED
from test_selfcontained import self_contained

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
VERSION = (ROOT / "VERSION").read_text().strip()

pytestmark = [
    pytest.mark.skipif(SANITIZED, reason="a wheel carries an unsanitized loom (setup.py refuses "
                                         "the ASan build): runs in the normal pass"),
    pytest.mark.skipif(not self_contained(), reason=f"{BUILD} is not configured with "
                                                    f"LOOM_SELF_CONTAINED=ON (the wheel carries "
                                                    f"its loom)")]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(ROOT / "scripts" / "wheel.sh"), "--from", str(BUILD),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    whl = Path(r.stdout.strip().splitlines()[-1])
    print(f"wheel.sh --from: {time.monotonic() - t0:.1f} s")
    assert whl.parent == out and whl.name == f"loom-{VERSION}-py3-none-linux_x86_64.whl", whl
    with zipfile.ZipFile(whl) as z:
        names = {i.filename: i for i in z.infolist()}
        ep = z.read(f"loom-{VERSION}.dist-info/entry_points.txt").decode()
        install = z.read("loom/_install.py").decode()
    for f in ("loom/_native/bin/loom", "loom/_native/lib/libloom.so"):
        assert names[f].external_attr >> 16 & 0o111, f"{f} is not executable in the wheel"
    assert "loom/_native/lib/libloom-deps/libjansson.so.4" in names
    assert "loom = loom._find:main" in ep and "SOURCE = None" in install
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed offline; cloudpickle (the one
    dependency) from the system's site-packages (python3-cloudpickle,
    scripts/setup.sh)."""
    d = tmp_path_factory.mktemp("wheelvenv")
    t0 = time.monotonic()
    r = subprocess.run([PY, "-m", "venv", "--system-site-packages", str(d / "venv")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    py = d / "venv" / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
                       capture_output=True, text=True, timeout=120, env=bare_env())
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"venv and pip install of the wheel: {time.monotonic() - t0:.1f} s")
    return d / "venv"


def bare_env(home=None):
    """The environment of a user with nothing but the wheel: PATH=/usr/bin:/bin,
    no LOOM_BIN/LOOM_LIBRARY, no PYTHONPATH, no LD_LIBRARY_PATH."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("LOOM_BIN", "LOOM_LIBRARY", "LOOM_LIB", "PYTHONPATH", "LD_LIBRARY_PATH",
                      "LD_PRELOAD", "VIRTUAL_ENV", "PYTHONHOME", "LOOM_COORD", "LOOM_SECRET",
                      "LOOM_TASK")}
    e.update(PATH="/usr/bin:/bin", NO_COLOR="1")
    if home:
        e["LOOM_HOME"] = str(home)
    return e


# Each task: libloom through the package (ctypes) and a KV add, then which
# libloom it loaded and which binary runs its agent (the task's parent:
# the agent's guard, which is the agent's own binary).
TASK = ("import json, os, loom; l = loom.Loom(); n = l.kv_add('n'); l.close(); "
        "print('TASK', json.dumps([loom.task().task, loom.library(), "
        "os.readlink('/proc/%d/exe' % os.getppid())]))")


def spec_text(py):
    return json.dumps({"name": "wheeljob", "roles": {
        "worker": {"instances": 2, "command": [str(py), "-c", TASK]},
        "chief": {"command": "echo chief says $LOOM_RANK"}}})


def check_tasks(stdout, venv):
    seen = sorted(json.loads(l.split("TASK ", 1)[1]) for l in stdout.splitlines()
                  if "TASK " in l)
    assert [s[0] for s in seen] == ["worker:0", "worker:1"], stdout
    for _, lib, agent in seen:
        assert lib.startswith(str(venv) + "/") and lib.endswith("/loom/_native/lib/libloom.so"), lib
        assert agent.startswith(str(venv) + "/") and agent.endswith("/loom/_native/bin/loom"), agent
    assert "[chief:0] chief says 0" in stdout, stdout


def test_console_script_runs_a_job(venv, loom):
    cwd = loom.tmp / "elsewhere"
    cwd.mkdir()
    (cwd / "job.json").write_text(spec_text(venv / "bin" / "python"))
    e = bare_env(loom.home)
    r = subprocess.run([str(venv / "bin" / "loom"), "--version"], capture_output=True,
                       text=True, env=e, cwd=cwd, timeout=60)
    assert r.returncode == 0 and VERSION in r.stdout, r.stdout + r.stderr
    # as on a stock node (hidden.py: the checkout, the build and libuv's,
    # libyaml's, jansson's and protobuf-c's shared objects not there): the
    # wheel needs glibc alone
    r = hidden.run(["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, venv / "bin" / "loom", "run",
                    "job.json"], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    check_tasks(r.stdout, venv)
    assert loom.state()["state"] == "succeeded"
    # a failing job: the console script passes the binary's exit status on
    (cwd / "fail.json").write_text(json.dumps({"name": "failing", "roles": {
        "worker": {"command": "echo going down; exit 3"}}}))
    r = subprocess.run([str(venv / "bin" / "loom"), "run", "fail.json"], capture_output=True,
                       text=True, env=e, cwd=cwd, timeout=120)
    assert r.returncode == 1 and "going down" in r.stdout, r.stdout + r.stderr  # 1: it failed
    failed = [j for j in loom.jobs() if loom.state(j)["state"] != "succeeded"]
    assert len(failed) == 1 and loom.state(failed[0])["state"] == "failed"


def test_import_loom_run(venv, loom):
    cwd = loom.tmp / "elsewhere"
    cwd.mkdir()
    py = venv / "bin" / "python"
    code = f"""
import json, loom
spec = json.loads({spec_text(py)!r})
r = loom.run(loom.Spec(name=spec["name"], roles=spec["roles"]), timeout=120)
print(json.dumps([r.ok, r.exit_code, r.stdout, loom.binary(), loom.library(), loom.__file__,
                  loom.__version__]))
"""
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True,
                       env=bare_env(loom.home), cwd=cwd, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    ok, code, stdout, binary, library, init, version = json.loads(r.stdout.splitlines()[-1])
    assert ok and code == 0, stdout
    check_tasks(stdout, venv)
    pkg = Path(init).parent
    assert pkg.is_relative_to(venv) and version == VERSION, init
    assert binary == str(pkg / "_native" / "bin" / "loom")
    assert library == str(pkg / "_native" / "lib" / "libloom.so")
    assert loom.state()["state"] == "succeeded"
