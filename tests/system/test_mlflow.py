"""MLflow tracking (issue 33, item 5): with mlflow importable and
MLFLOW_TRACKING_URI set, loom.run opens one MLflow run for the job, logs
the spec and the function's arguments as params, every loom metric with
its step, the events, the summary and each task's log as artifacts, and
ends the run as the job ended; the tasks get MLFLOW_RUN_ID and log into the
same run. Against a real tracking server (PyPI mlflow, `mlflow server`
with a sqlite backend and proxied artifacts) that the module starts once;
the callers run in the MLflow environment's Python (.venv-mlflow), and
what they logged is read back through the server's REST API, as the UI
reads it."""
import json
import os
import signal
import socket
import subprocess
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import LIBLOOM, LOOM, ROOT, SANITIZED, pylib_env

MLFLOW_PYTHON = Path(os.environ.get("LOOM_MLFLOW_PYTHON",
                                    ROOT / ".venv-mlflow" / "bin" / "python"))

pytestmark = [
    pytest.mark.skipif(not MLFLOW_PYTHON.exists(), reason=f"no MLflow environment at "
                       f"{MLFLOW_PYTHON}: run scripts/setup-mlflow.sh"),
    pytest.mark.skipif(SANITIZED, reason="MLflow's server and client are Python: runs in the "
                       "normal pass (loom.run(fn)'s C paths run under ASan in test_functions)"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(uri, endpoint, **query):
    """GET uri/endpoint?query from the tracking server: the JSON it answers
    (an artifact's text for get-artifact)."""
    url = f"{uri}/{endpoint}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    return json.loads(body) if endpoint.startswith("api/") else body.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A tracking server of the module's own: sqlite runs, artifacts proxied
    (clients upload them over HTTP, as they would to a remote server)."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    mlflow = MLFLOW_PYTHON.parent / "mlflow"
    log = open(d / "server.log", "w")
    p = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{d}/runs.db",
                          "--artifacts-destination", str(d / "artifacts"), "--host", "127.0.0.1",
                          "--port", str(port), "--workers", "1"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=d)
    uri = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 180
        while True:
            assert p.poll() is None, (d / "server.log").read_text()
            try:
                with urllib.request.urlopen(uri + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < end, "the MLflow server did not answer /health in 180 s:\n" + \
                (d / "server.log").read_text()
            time.sleep(0.2)
        yield uri
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the module's own: nothing in it to keep
        p.wait()
        log.close()


def caller(loom, code, env=None, timeout=180):
    """Runs code as a script in the MLflow environment's Python with this
    tree's package and build; the JSON its stdout's last line holds."""
    script = loom.tmp / "caller.py"
    script.write_text(textwrap.dedent(code))
    e = dict(loom.env, PYTHONPATH=str(ROOT / "python"), LOOM_BIN=str(LOOM),
             LOOM_LIBRARY=str(LIBLOOM), **pylib_env())
    e.update(env or {})
    r = subprocess.run([str(MLFLOW_PYTHON), str(script)], capture_output=True, text=True, env=e,
                       cwd=loom.tmp, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def post(uri, path, body):
    req = urllib.request.Request(f"{uri}/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def run_of(uri, run_id):
    r = get(uri, "api/2.0/mlflow/runs/get", run_id=run_id)["run"]
    data = r["data"]
    return (r["info"], {p["key"]: p["value"] for p in data.get("params", [])},
            {m["key"]: m["value"] for m in data.get("metrics", [])},
            {t["key"]: t["value"] for t in data.get("tags", [])})


def history(uri, run_id, key):
    h = get(uri, "api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key=key)
    return sorted((m["step"], m["value"]) for m in h.get("metrics", []))


def artifacts(uri, run_id, path):
    a = get(uri, "api/2.0/mlflow/artifacts/list", run_id=run_id, path=path)
    return sorted(f["path"] for f in a.get("files", []))


def test_a_function_job_is_one_mlflow_run_its_tasks_log_into(loom, server):
    out, err = caller(loom, """
        import json, os, loom

        def measured(task):
            # the agent's first usage report for this task is in the job's events
            with open(os.path.join(loom.task().job_dir, "events.jsonl")) as f:
                return any('"source":"agent"' in l and f'"task":"{task}"' in l for l in f)

        def train(lr, epochs=3):
            import time, mlflow
            t = loom.Loom()
            for step in range(epochs):
                t.metric("loss", step, lr / (step + 1) + t.index)
            end = time.monotonic() + 60      # (every 3 s: while the task still runs)
            while not measured(os.environ["LOOM_TASK"]) and time.monotonic() < end:
                time.sleep(0.1)
            run = os.environ["MLFLOW_RUN_ID"]    # mlflow.end_run() unsets it
            mlflow.log_metric("task_" + str(t.index), 10.0 + t.index)
            mlflow.end_run()
            return run

        r = loom.run(train, args=(0.5,), kwargs={"epochs": 4}, num_workers=2, timeout=120)

        def boom():
            raise ValueError("bad batch")

        try:
            loom.run(boom, timeout=120)
            failed = None
        except loom.TaskError as e:
            failed = e.result.mlflow_run_id
        print(json.dumps({"run": r.mlflow_run_id, "values": r.values, "job": r.job_id,
                          "failed": failed}))
        """, env={"MLFLOW_TRACKING_URI": server})
    run = out["run"]
    assert run and out["failed"] and out["failed"] != run, out
    # the tasks were given the caller's run and logged into it
    assert out["values"] == {"worker:0": run, "worker:1": run}, out
    info, params, metrics, tags = run_of(server, run)
    assert info["status"] == "FINISHED" and info["run_name"] == "train", info
    assert tags["loom.job"] == out["job"] and tags["loom.state"] == "succeeded", tags
    assert tags["loom.exit_code"] == "0" and tags["loom.backend"] == "local", tags
    assert params["args.0"] == "0.5" and params["kwargs.epochs"] == "4", params
    assert params["roles.worker.instances"] == "2" and params["name"] == "train", params
    assert not any(k.startswith("env") or ".env." in k for k in params), params
    # each task's metric with every step, under its task's name
    assert history(server, run, "loss/worker-0") == [(s, 0.5 / (s + 1)) for s in range(4)]
    assert history(server, run, "loss/worker-1") == [(s, 0.5 / (s + 1) + 1) for s in range(4)]
    assert metrics["task_0"] == 10.0 and metrics["task_1"] == 11.0, metrics
    # the agents' measurements, as system metrics of each task
    for task in ("worker-0", "worker-1"):
        assert {f"system/cpu_percent/{task}", f"system/memory_bytes/{task}"} <= set(metrics), \
            metrics
    assert artifacts(server, run, "loom") == ["loom/events.jsonl", "loom/logs", "loom/spec.json",
                                              "loom/status.json"]
    assert artifacts(server, run, "loom/logs") == ["loom/logs/all.log", "loom/logs/worker-0.log",
                                                   "loom/logs/worker-1.log"]
    events = [json.loads(line) for line in
              get(server, "get-artifact", run_id=run, path="loom/events.jsonl").splitlines()]
    assert events[0]["event"] == "job_started" and events[-1]["event"] == "job_finished", events
    assert events[-1]["outcome"] == "succeeded", events[-1]
    assert sum(e["event"] == "metric" and e["tag"] == "loss" for e in events) == 8, events
    status = json.loads(get(server, "get-artifact", run_id=run, path="loom/status.json"))
    assert status["job"] == out["job"] and status["state"] == "succeeded", status
    assert "dashboard" not in status, status  # its URL holds the dashboard's token
    # the failed job's run: FAILED, with the task's error
    finfo, _, _, ftags = run_of(server, out["failed"])
    assert finfo["status"] == "FAILED" and ftags["loom.state"] == "failed", (finfo, ftags)
    assert "ValueError" in ftags["loom.error"] and "bad batch" in ftags["loom.error"], ftags
    log = get(server, "get-artifact", run_id=out["failed"], path="loom/logs/worker-0.log")
    assert "ValueError: bad batch" in log, log


def test_a_spec_job_a_named_experiment_and_a_stopped_job(loom, server):
    spec = loom.spec("""
name: specjob
env: {SECRET_TOKEN: "do-not-log-me"}
roles:
  worker: {instances: 2, command: 'echo "run=$MLFLOW_RUN_ID exp=$MLFLOW_EXPERIMENT_ID"'}
""")
    out, _ = caller(loom, f"""
        import json, loom
        r = loom.run({str(spec)!r}, mlflow={server!r})
        try:
            loom.run({{"name": "sleeper", "roles": {{"worker": {{"command": "sleep 60"}}}}}},
                     mlflow=True, timeout=3)
            stopped = None
        except loom.JobTimeout as e:
            stopped = e.job_id
        print(json.dumps({{"run": r.mlflow_run_id, "out": r.stdout, "stopped": stopped}}))
        """, env={"MLFLOW_EXPERIMENT_NAME": "loom-tests", "MLFLOW_TRACKING_URI": server})
    run = out["run"]
    info, params, _, tags = run_of(server, run)
    exp = get(server, "api/2.0/mlflow/experiments/get-by-name", experiment_name="loom-tests")
    assert info["experiment_id"] == exp["experiment"]["experiment_id"], (info, exp)
    assert info["status"] == "FINISHED" and info["run_name"] == "specjob", info
    for i in range(2):
        assert f"[worker:{i}] run={run} exp={info['experiment_id']}" in out["out"], out
    assert params["roles.worker.command"].startswith("echo"), params
    assert "do-not-log-me" not in json.dumps(params), params
    spec_art = json.loads(get(server, "get-artifact", run_id=run, path="loom/spec.json"))
    assert spec_art["env"]["SECRET_TOKEN"] == "(not logged)", spec_art
    assert spec_art["env"]["MLFLOW_RUN_ID"] == "(not logged)", spec_art  # the run it is in
    log = get(server, "get-artifact", run_id=run, path="loom/logs/worker-1.log")
    assert f"run={run}" in log, log
    # the job stopped by run(timeout=): its run ends KILLED
    found = post(server, "api/2.0/mlflow/runs/search", {
        "experiment_ids": [exp["experiment"]["experiment_id"]],
        "filter": f"tags.`loom.job` = '{out['stopped']}'"})
    assert out["stopped"] and len(found.get("runs", [])) == 1, found
    assert found["runs"][0]["info"]["status"] == "KILLED", found


def test_an_unreachable_server_is_said_before_anything_starts(loom):
    out, _ = caller(loom, """
        import json, loom
        try:
            loom.run(print, mlflow="http://127.0.0.1:1", timeout=60)
            said = None
        except loom.TrackingError as e:
            said = str(e)
        # without a tracking URI nothing is tracked (mlflow is importable here)
        r = loom.run(abs, args=(-2,), timeout=60)
        print(json.dumps({"said": said, "run": r.mlflow_run_id, "values": r.values}))
        """, env={"MLFLOW_TRACKING_URI": ""})
    assert out["said"] and "http://127.0.0.1:1 cannot be reached" in out["said"], out
    assert "nothing was started" in out["said"], out
    assert out["run"] is None and out["values"] == {"worker:0": 2}, out
    # the refused job left no job directory: only the second one ran
    assert len(loom.jobs()) == 1, loom.jobs()
