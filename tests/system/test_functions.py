"""loom.run(fn, ...): a Python function run in every task of a job, shipped
with cloudpickle, each task's return value back in Result.values, an
exception in a task raised in the caller as loom.TaskError once the job has
stopped, what cannot be pickled refused before anything starts (issue 33,
item 2). Each program is a script run by /usr/bin/python3 with
PYTHONPATH=python, so its functions live in __main__ and are pickled by
value, as a notebook cell's are."""
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clusters import hadoop_available
from conftest import LIBLOOM, LOOM, ROOT, pylib_env

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def program(loom, code, env=None, timeout=120):
    """Runs code as a script (__main__) with this tree's package and build;
    the JSON its stdout's last line holds."""
    script = loom.tmp / "prog.py"
    script.write_text(textwrap.dedent(code))
    e = dict(loom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
             LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
    e.update(env or {})
    r = subprocess.run([PY, str(script)], capture_output=True, text=True, env=e, cwd=loom.tmp,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_values_per_task_closures_lambdas_args_kwargs(loom):
    out = program(loom, """
        import json, os, loom
        base = {"offset": 100}          # a local the function closes over

        def make():
            scale = 3
            def train(a, b=0, *, tag):
                t = loom.task()
                return {"task": t.task, "role": t.role, "rank": t.rank,
                        "env_task": os.environ["LOOM_TASK"], "job": os.environ["LOOM_JOB_ID"],
                        "sum": (a + b) * scale + base["offset"], "tag": tag,
                        "pid": os.getpid()}
            return train

        r = loom.run(make(), args=(1,), kwargs={"b": 2, "tag": "x"},
                     roles={"chief": loom.Role(), "worker": loom.Role(instances=2,
                                                                      memory="256MiB")},
                     timeout=60)
        lam = loom.run(lambda k: [k, os.environ["LOOM_TASK"]], args=("lambda",), num_workers=3,
                       timeout=60)
        print(json.dumps([r.ok, r.state, r.job_id, r.values, lam.values, lam.job_id,
                          os.getpid()]))
        """)
    ok, state, job, values, lam, lam_job, caller = out
    assert (ok, state) == (True, "succeeded")
    assert sorted(values) == ["chief:0", "worker:0", "worker:1"]
    for k, v in values.items():
        assert v["task"] == v["env_task"] == k and v["job"] == job
        assert v["sum"] == 109 and v["tag"] == "x"
        assert v["pid"] != caller
    assert values["chief:0"]["rank"] == 0 and values["chief:0"]["role"] == "chief"
    assert sorted(values[k]["rank"] for k in ("worker:0", "worker:1")) == [1, 2]
    assert lam == {f"worker:{i}": ["lambda", f"worker:{i}"] for i in range(3)}
    # the generated specs: the roles as given, each task running loom._fn
    assert len(loom.jobs()) == 2 and lam_job != job
    st = loom.state(loom.home / "jobs" / job)
    assert sorted(t["task"] for t in st["tasks"]) == ["chief:0", "worker:0", "worker:1"]


def test_a_raising_task_is_a_task_error_after_the_job_stopped(loom):
    out = program(loom, """
        import json, os, time, loom

        def work(n):
            if os.environ["LOOM_TASK"] == "worker:1":
                raise ValueError(f"bad batch {n} in " + os.environ["LOOM_TASK"])
            time.sleep(120)             # stopped by the failure, not waited for

        t0 = time.monotonic()
        try:
            loom.run(work, args=(7,), num_workers=2, timeout=90)
            print(json.dumps(None))
        except loom.TaskError as e:
            print(json.dumps([e.task, e.message, e.traceback, e.remote_type, e.job_id, str(e),
                              isinstance(e, loom.LoomError), time.monotonic() - t0,
                              e.result.job_id, e.result.state, e.result.values]))
        """)
    task, msg, tb, typ, job, text, base, took, rjob, rstate, rvalues = out
    assert (rjob, rstate, rvalues) == (job, "failed", {})
    assert task == "worker:1" and typ == "ValueError" and base
    assert msg == "worker:1 raised ValueError: bad batch 7 in worker:1"
    # the remote traceback: the function's own frame and line, not loom's
    assert tb.startswith("Traceback (most recent call last):"), tb
    assert "prog.py" in tb and ", in work" in tb and "raise ValueError" in tb, tb
    assert tb.rstrip().endswith("ValueError: bad batch 7 in worker:1"), tb
    assert "_fn.py" not in tb, tb
    assert msg in text and tb.rstrip() in text
    assert took < 60  # fail-fast: worker:0's sleep was cut short
    # the job stopped: failed, worker:0 stopped, nothing running
    st = loom.state(loom.home / "jobs" / job)
    assert st["state"] == "failed", st
    assert not [t for t in st["tasks"] if t["state"] == "running"], st["tasks"]


def test_unpicklable_arguments_are_refused_before_anything_starts(loom):
    out = program(loom, """
        import json, threading, loom
        res = []
        lock = threading.Lock()

        def f(x=None):
            return x

        def g():
            with lock:                  # closes over nothing, but uses a global
                return 1

        def outer():
            held = threading.Lock()
            def h():
                return held.locked()
            return h

        for call in (lambda: loom.run(f, args=(threading.Lock(),)),
                     lambda: loom.run(f, kwargs={"x": threading.Lock()}),
                     lambda: loom.run(g),
                     lambda: loom.run(outer())):
            try:
                call()
                res.append(None)
            except loom.NotPicklable as e:
                res.append([e.what, str(e), isinstance(e, TypeError)])
        print(json.dumps(res))
        """)
    assert out[0][0] == "args[0] (a _thread.lock)" and out[0][2]
    assert out[0][1] == ("loom.run: cannot pickle args[0] (a _thread.lock) to ship it to the "
                         "tasks: TypeError: cannot pickle '_thread.lock' object")
    assert out[1][0] == "kwargs['x'] (a _thread.lock)"
    assert out[2][0] == "lock (a _thread.lock), a global that function g uses"
    assert out[3][0] == ("held (a _thread.lock), a variable that function outer.<locals>.h "
                         "closes over")
    # nothing started: no job directory
    assert not loom.jobs()


def test_a_module_missing_in_the_task_is_named(loom):
    # a function pickled by reference (its module is importable here, from a
    # directory only this process has on sys.path)
    mod = loom.tmp / "only_here"
    mod.mkdir()
    (mod / "helper_only_here.py").write_text("def f():\n    return 1\n")
    out = program(loom, f"""
        import json, sys, loom
        sys.path.insert(1, {str(mod)!r})
        from helper_only_here import f
        try:
            loom.run(f, timeout=60)
            print(json.dumps(None))
        except loom.TaskError as e:
            print(json.dumps([e.task, e.module, e.message, e.traceback]))
        """)
    task, module, msg, tb = out
    assert task == "worker:0" and module == "helper_only_here"
    assert msg == (f"worker:0: the function could not be loaded: module 'helper_only_here' is "
                   f"not installed for the task's Python ({PY})")
    assert "ModuleNotFoundError: No module named 'helper_only_here'" in tb


def test_python_names_the_tasks_interpreter(loom, tmp_path):
    # a bare virtual environment (no system site packages): python= runs the
    # tasks there, and, without cloudpickle, the load failure names it
    r = subprocess.run([PY, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    bare = tmp_path / "bare" / "bin" / "python"
    out = program(loom, f"""
        import json, loom
        try:
            loom.run(print, python={str(bare)!r}, timeout=60)
            print(json.dumps(None))
        except loom.TaskError as e:
            print(json.dumps([e.task, e.module, e.message]))
        """)
    assert out == ["worker:0", "cloudpickle",
                   "worker:0: the function could not be loaded: module 'cloudpickle' is not "
                   f"installed for the task's Python ({bare})"]
    # a python that cannot start: the job fails without a function's error
    out = program(loom, """
        import json, loom
        try:
            loom.run(print, python="/nonexistent/python3", timeout=60)
            print(json.dumps(None))
        except loom.JobFailed as e:
            print(json.dumps([e.result.state, e.result.values, str(e)]))
        """)
    state, values, msg = out
    assert state == "failed" and values == {} and "worker:0" in msg, out


def bare_venv(path):
    """A virtual environment of /usr/bin/python3 with Debian's cloudpickle
    copied into its site-packages; its directory."""
    r = subprocess.run([PY, "-m", "venv", "--without-pip", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    site = next((path / "lib").glob("python3.*")) / "site-packages"
    shutil.copytree("/usr/lib/python3/dist-packages/cloudpickle", site / "cloudpickle")
    return site


def test_python_auto_refuses_what_it_cannot_pack_before_anything_starts(loom, tmp_path):
    # /usr/bin/python3 runs in no virtual environment; a conda environment
    # is packed with conda-pack, not by loom: both named, no job started
    code = """
        import json, loom
        try:
            loom.run(print, backend="yarn", python="auto", timeout=60)
            print(json.dumps(None))
        except loom.PackError as e:
            print(json.dumps([type(e).__name__, str(e)]))
        """
    name, msg = program(loom, code)
    assert name == "PackError" and f"{PY} runs in none" in msg, msg
    assert "python='auto' packs the active virtual environment" in msg, msg
    conda = tmp_path / "conda"
    bare_venv(conda)
    (conda / "conda-meta").mkdir()
    script = loom.tmp / "conda.py"
    script.write_text(textwrap.dedent(code))
    e = dict(loom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
             LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
    r = subprocess.run([str(conda / "bin" / "python"), str(script)], capture_output=True,
                       text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    name, msg = json.loads(r.stdout.strip().splitlines()[-1])
    assert name == "PackError" and f"{conda} is a conda environment" in msg, msg
    assert "conda-pack" in msg, msg
    assert not loom.jobs()  # nothing started


def env_archive(tmp_path, name):
    """tmp_path/NAME.tar.gz: a bare venv whose module onlyinenv says
    WHERE = NAME, packed whole."""
    site = bare_venv(tmp_path / name)
    (site / "onlyinenv.py").write_text(f"WHERE = {name!r}\n")
    arch = tmp_path / f"{name}.tar.gz"
    subprocess.run(["tar", "-C", str(tmp_path / name), "-czf", str(arch), "."], check=True)
    return arch


def test_python_names_an_environment_archive_the_tasks_run(loom, tmp_path):
    # a whole environment packed as tf-yarn's pyenv_zip_path is (a
    # virtualenv with a package only it has): unpacked at loom-env in each
    # task's directory, whose bin/python runs the function
    arch = env_archive(tmp_path, "env")
    out = program(loom, f"""
        import json, loom, sys

        def where():
            import onlyinenv
            return [onlyinenv.WHERE, sys.executable, sys.prefix]

        r = loom.run(where, num_workers=2, python={str(arch)!r}, timeout=60)
        print(json.dumps(r.values))
        """)
    assert sorted(out) == ["worker:0", "worker:1"], out
    for what, exe, prefix in out.values():
        assert what == "env" and exe.endswith("/loom-env/bin/python"), (what, exe)
        assert prefix == exe[:-len("/bin/python")], (exe, prefix)
    # by node label, as tf-yarn's {NodeLabel.CPU: ..., NodeLabel.GPU: ...}:
    # each role runs its label's environment
    arch2 = env_archive(tmp_path, "env2")
    out = program(loom, f"""
        import json, loom

        def where():
            import onlyinenv
            return onlyinenv.WHERE

        r = loom.run(where, roles={{"chief": loom.Role(), "worker": loom.Role(label="gpu")}},
                     python={{"cpu": {str(arch)!r}, "gpu": {str(arch2)!r}}}, timeout=60)
        print(json.dumps(r.values))
        """)
    assert out == {"chief:0": "env", "worker:0": "env2"}, out
    out = program(loom, """
        import json, loom
        try:
            loom.run(print, python="/nonexistent/env.tar.gz", timeout=60)
        except loom.NotFound as e:
            print(json.dumps(str(e)))
        """)
    assert out == "loom.run(fn): python='/nonexistent/env.tar.gz': no such archive", out


def test_procs_run_the_function_in_each_process(loom):
    out = program(loom, """
        import json, os, loom
        r = loom.run(lambda: [os.environ["LOCAL_RANK"], os.environ["RANK"]],
                     roles={"worker": loom.Role(instances=2, procs=2)}, timeout=60)
        print(json.dumps(r.values))
        """)
    assert out == {"worker:0/0": ["0", "0"], "worker:0/1": ["1", "1"],
                   "worker:1/0": ["0", "2"], "worker:1/1": ["1", "3"]}


def test_roles_with_a_command_and_missing_cloudpickle_are_refused(loom, tmp_path):
    # cloudpickle hidden from the caller: a module of that name that fails
    fake = tmp_path / "nocp"
    fake.mkdir()
    (fake / "cloudpickle.py").write_text("raise ImportError('hidden by the test')\n")
    out = program(loom, """
        import json, loom
        res = []
        for call in (lambda: loom.run(print, roles={"worker": loom.Role(command="true")}),
                     lambda: loom.run(print, roles={"w": loom.Role()}, num_workers=2),
                     lambda: loom.run("job.yaml", num_workers=2)):
            try:
                call()
                res.append(None)
            except (ValueError, TypeError) as e:
                res.append(str(e))
        try:
            loom.run(print)
            res.append(None)
        except loom.NotFound as e:
            res.append(str(e))
        print(json.dumps(res))
        """, env={"PYTHONPATH": f"{fake}:{ROOT / 'python'}"})
    assert out[0].startswith("loom.run(fn): role 'worker' has a command"), out[0]
    assert out[1] == "loom.run(fn): give roles= or num_workers=, not both"
    assert out[2].startswith("loom.run: num_workers apply to a function"), out[2]
    assert "cannot import (hidden by the test)" in out[3] and "python3-cloudpickle" in out[3]
    assert not loom.jobs()


def test_retries_keep_the_last_attempts_values_and_env_reaches_tasks(loom):
    out = program(loom, """
        import json, os, loom

        def flaky():
            # attempt 0 fails in worker:1, attempt 1 succeeds everywhere
            if os.environ["LOOM_ATTEMPT"] == "0" and os.environ["LOOM_TASK"] == "worker:1":
                raise RuntimeError("first attempt")
            return [os.environ["LOOM_ATTEMPT"], os.environ["PYFN_MARK"]]

        r = loom.run(flaky, num_workers=2, retries=1, env={"PYFN_MARK": "m1"}, timeout=90)
        print(json.dumps([r.ok, r.values]))
        """)
    ok, values = out
    assert ok and values == {"worker:0": ["1", "m1"], "worker:1": ["1", "m1"]}


@pytest.mark.parametrize("size", [3 << 20])
def test_a_large_return_value_comes_back_whole(loom, size):
    out = program(loom, f"""
        import hashlib, json, os, loom

        def big():
            data = os.urandom({size})
            return data, hashlib.sha256(data).hexdigest()

        r = loom.run(big, num_workers=2, timeout=90)
        print(json.dumps([[len(d), hashlib.sha256(d).hexdigest() == h]
                          for d, h in (r.values["worker:0"], r.values["worker:1"])]))
        """)
    # several result events each (512 KiB a part), reassembled in order
    assert out == [[size, True], [size, True]]


@pytest.mark.skipif(not hadoop_available(), reason="java and mvn are not installed "
                    "(scripts/setup.sh installs a JDK and Maven)")
def test_functions_on_yarn(yloom, yarn):
    """The same on the one-host YARN cluster: the pickle goes to each
    container as a localized file (`files`), the values and the error come
    back as events; the tasks run python3 from the container's PATH."""
    out = program(yloom, """
        import json, os, loom
        seen = {"n": 5}
        # a YARN container takes none of this shell's environment but LOOM_*
        # and the sanitizers' options: what the tasks' Python needs (under
        # ASan, the runtime preloaded) goes in the job's env
        task_env = {k: os.environ[k] for k in ("LD_PRELOAD",) if k in os.environ}

        def where(k):
            return [os.environ["LOOM_TASK"], "CONTAINER_ID" in os.environ, k * seen["n"],
                    os.path.islink("loom-fn.pkl")]

        r = loom.run(where, args=(2,), backend="yarn", roles={
            "chief": loom.Role(memory="256MiB"), "worker": loom.Role(instances=2,
                                                                      memory="256MiB")},
            env=task_env, timeout=120)

        def fails():
            if os.environ["LOOM_TASK"] == "worker:0":
                raise KeyError("on yarn")
            return 1

        try:
            loom.run(fails, num_workers=2, backend="yarn", env=task_env, timeout=120)
            err = None
        except loom.TaskError as e:
            err = [e.task, e.message, e.traceback]
        print(json.dumps([r.ok, r.values, err]))
        """, timeout=300)
    ok, values, err = out
    assert ok
    assert values == {t: [t, True, 10, True] for t in ("chief:0", "worker:0", "worker:1")}
    assert err[0] == "worker:0" and err[1] == "worker:0 raised KeyError: 'on yarn'"
    assert "KeyError: 'on yarn'" in err[2] and ", in fails" in err[2]
