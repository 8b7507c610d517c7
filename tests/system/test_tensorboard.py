"""TensorBoard for real: a job's `tensorboard` role runs TensorBoard from
PyPI (the TensorFlow environment, scripts/setup-tf.sh) on the job's
tensorboard/ directory, and what it serves through its own HTTP data API
(/data/runs, /data/plugin/{scalars,histograms,text}/...) is exactly what
the tasks wrote:

- from C through loom/summary.h: examples/ckpt-demo/summary-demo (values in
  closed form) and the Fashion-MNIST demo (checked against its event file,
  decoded independently by test_summary.py's decoder);
- from TensorFlow: a small tf.summary script, a task of the same job, that
  also sends its loss and accuracy to loom's dashboard (loom.Loom.metric).

`loom status` and the dashboard show the role's URL while it runs; after
the job, `loom status` and the page (`loom ui`) give the one-liner that
serves the finished job's summaries, and that one-liner, run here, serves
the same values."""
import json
import os
import re
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import LIBLOOM, ROOT, TF_PYTHON, parse_status, pylib_env
from test_dashboard import CHROMIUM, api, chromium, dashboard_of, start_ui, stop_ui
from test_summary import (DATA, DEMO, MLP, TEXT, decode_file, event_files, get, hist_values,
                          need_protoc, packed_doubles, pb_fields, pb_get, tf_histogram)

TENSORBOARD = TF_PYTHON.parent / "tensorboard"
MLP_ARGS = ["--epochs", "2", "--limit", "2048", "--batch", "256"]  # 8 steps an epoch


@pytest.fixture
def tensorboard():
    """TensorBoard's command from the TensorFlow environment. It loads no
    libloom, so it runs in the sanitized pass too."""
    if not TENSORBOARD.exists():
        pytest.skip(f"no TensorBoard at {TENSORBOARD}: run scripts/setup-tf.sh")
    return TENSORBOARD


def tb_role(tb):
    """The tensorboard role as README shows it, reloading every second."""
    return (f'exec {tb} --logdir "$LOOM_TENSORBOARD_DIR" --host "$LOOM_HOST" --port "$LOOM_PORT" '
            f'--reload_interval 1')


GATE = 'while [ ! -e "$LOOM_JOB_DIR/release" ]; do sleep 0.1; done'


def tb_get(base, path, **query):
    url = f"{base.rstrip('/')}/{path}" + ("?" + urllib.parse.urlencode(query) if query else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None


def tb_read(base, runs):
    """Everything TensorBoard serves for runs: {run: {"scalars": {tag:
    {step: value}}, "histograms": {tag: {step: [[left, right, count]]}},
    "text": {tag: {step: html}}}}, or None while it is not up."""
    out = {}
    st = tb_get(base, "data/plugin/scalars/tags")
    ht = tb_get(base, "data/plugin/histograms/tags")
    tt = tb_get(base, "data/plugin/text/tags")
    if st is None or ht is None or tt is None:
        return None
    for run in runs:
        r = out[run] = {"scalars": {}, "histograms": {}, "text": {}}
        for tag in st.get(run, {}):
            pts = tb_get(base, "data/plugin/scalars/scalars", run=run, tag=tag) or []
            r["scalars"][tag] = {step: v for _, step, v in pts}
        for tag in ht.get(run, {}):
            pts = tb_get(base, "data/plugin/histograms/histograms", run=run, tag=tag) or []
            r["histograms"][tag] = {step: b for _, step, b in pts}
        for tag in tt.get(run, []):
            pts = tb_get(base, "data/plugin/text/text", run=run, tag=tag) or []
            r["text"][tag] = {p["step"]: p["text"] for p in pts}
    return out


def wait_served(base, want, timeout=90):
    """Polls TensorBoard until it serves exactly want (TensorBoard loads the
    files a while after they are written); returns what it serves."""
    end, seen = time.time() + timeout, None
    while time.time() < end:
        seen = tb_read(base, list(want))
        if seen == want:
            return seen
        time.sleep(0.5)
    for run in want:
        for kind in want[run]:
            got = (seen or {}).get(run, {}).get(kind)
            assert got == want[run][kind], f"TensorBoard at {base} serves for run {run}, {kind}"
    raise AssertionError(f"timed out after {timeout}s waiting for TensorBoard at {base} to serve "
                         f"what the tasks wrote")


def markdown_html(texts):
    """TensorBoard's own rendering of each Markdown text (its text plugin
    serves HTML): what it must serve once it has read our bytes."""
    code = ("import json, sys\nfrom tensorboard import plugin_util\n"
            "print(json.dumps([plugin_util.markdown_to_safe_html(t) for t in json.load(sys.stdin)]))")
    p = subprocess.run([str(TF_PYTHON), "-c", code], input=json.dumps(texts), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def tb_buckets(lo, hi, limits, counts):
    """A HistogramProto as TensorBoard serves it: [left, right, count] per
    bucket, the first from the minimum, the last to the maximum."""
    lefts = [lo] + limits[:-1]
    rights = limits[:-1] + [hi]
    return [[a, b, c] for a, b, c in zip(lefts, rights, counts)]


def expected_probe(steps):
    """What summary-demo writes, from its closed forms."""
    sc = {"loss": {s: float(np.float32(1.0 / (1 + s))) for s in range(steps)},
          "train/accuracy": {s: float(np.float32(s / 100.0)) for s in range(steps)}}
    hist = {}
    for s in range(0, steps, 10):
        vals = [v for v in hist_values(s) if np.isfinite(v)]
        limits, counts = tf_histogram(vals)
        hist[s] = tb_buckets(min(vals), max(vals), limits, counts)
    (html,) = markdown_html([TEXT.decode()])
    return {"scalars": sc, "histograms": {"weights": hist}, "text": {"notes": {0: html}}}


def expected_from_file(run_dir):
    """What an event file holds, decoded independently (test_summary.py),
    in the shape TensorBoard serves it."""
    (path,) = event_files(run_dir)
    out = {"scalars": {}, "histograms": {}, "text": {}}
    texts = []
    for step, tag, kind, v, rec in decode_file(path):
        if kind == "scalar":
            out["scalars"].setdefault(tag, {})[step] = v[1]
        elif kind == "histo":
            hb = pb_get(rec, 5, 1, 5)
            f = {fi: val for fi, wt, val in pb_fields(hb) if fi in (6, 7)}
            out["histograms"].setdefault(tag, {})[step] = tb_buckets(
                get(v, 1)[1], get(v, 2)[1], packed_doubles(f[6]), packed_doubles(f[7]))
        else:
            texts.append((tag, step, pb_get(v[2], 8, 8).decode()))
    for (tag, step, _), html in zip(texts, markdown_html([t for _, _, t in texts])):
        out["text"].setdefault(tag, {})[step] = html
    return out


def release(p, jd):
    """Lets the job end (its gate task exits) and waits for `loom run`."""
    (jd / "release").touch()
    try:
        return p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        return p.communicate(timeout=30)


def task_states(loom, jd):
    return {t["task"]: t["state"] for t in loom.state(jd)["tasks"]}


def start_tensorboard(cmd, log):
    """Runs a TensorBoard command line (its own process group); returns the
    process and its URL, read from what it prints."""
    f = open(log, "w")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                         env={k: v for k, v in os.environ.items() if not k.startswith("LOOM_")})
    f.close()
    end = time.time() + 90
    while time.time() < end:
        m = re.search(r"TensorBoard [\d.]+ at (http://[\d.]+:\d+/)", Path(log).read_text())
        if m:
            return p, m.group(1)
        assert p.poll() is None, Path(log).read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(f"timed out after 90s waiting for TensorBoard to print its URL: "
                         f"{Path(log).read_text()[-2000:]}")


def stop_process_group(p):
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_tensorboard_role_serves_what_summary_h_wrote(loom, tmp_path, tensorboard):
    need_protoc()
    assert MLP.exists() and DEMO.exists(), "build first"
    if not (DATA / "train-images-idx3-ubyte.gz").exists():
        pytest.skip("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
    spec = loom.spec(f"""
name: tb
env: {{OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}}
roles:
  tensorboard: {{command: '{tb_role(tensorboard)}'}}
  chief: {{command: {json.dumps([str(MLP), *MLP_ARGS])}}}
  probe: {{command: {json.dumps([str(DEMO), "-", "--steps", "20"])}}}
  gate: {{command: '{GATE}'}}
""")
    p = loom.popen("run", spec)
    jd = loom.wait_for(lambda: loom.jobs() and loom.jobs()[-1], what="the job directory")
    try:
        url = loom.wait_for(lambda: (jd / "state.json").exists() and loom.state(jd).get("tensorboard"),
                            timeout=60, what="the tensorboard role's URL in state.json")
        tb = next(t for t in loom.state(jd)["tasks"] if t["task"] == "tensorboard:0")
        assert url == f"http://{tb['host']}:{tb['port']}/"
        loom.wait_for(lambda: task_states(loom, jd)["chief:0"] == "succeeded" and
                      task_states(loom, jd)["probe:0"] == "succeeded", timeout=240,
                      what="the chief (mlp) and the probe (summary-demo) to finish writing")
        assert sorted(x.name for x in (jd / "tensorboard").iterdir()) == ["chief-0", "probe-0"]

        # `loom status` shows the URL while TensorBoard runs.
        head, rows = parse_status(loom.run("status", jd.name).stdout)
        assert head["tboard"] == url, head
        assert {r["TASK"]: r["STATE"] for r in rows}["tensorboard:0"] == "running"

        # TensorBoard's own data API serves exactly what was written.
        want = {"probe-0": expected_probe(20), "chief-0": expected_from_file(jd / "tensorboard" / "chief-0")}
        assert sorted(want["chief-0"]["scalars"]) == sorted(
            ["train/loss", "train/accuracy", "test/loss", "test/accuracy", "throughput/samples_per_s",
             "epoch", "train/step_loss", "train/step_accuracy"])
        assert sorted(want["chief-0"]["histograms"]) == ["weights/w1", "weights/w2", "weights/w3"]
        assert list(want["chief-0"]["text"]) == ["config"] and "<table>" in want["chief-0"]["text"]["config"][0]
        served = wait_served(url, want)
        assert sorted(tb_get(url, "data/runs")) == ["chief-0", "probe-0"]
        assert len(served["chief-0"]["scalars"]["train/step_loss"]) == 16

        # The dashboard links it, and says the same in api/job.
        base, token = dashboard_of(loom, jd)
        job = api(base, "api/job", token)
        assert job["tensorboard"] == url and job["tensorboard_runs"] == ["chief-0", "probe-0"]
        if CHROMIUM:
            dom = chromium(tmp_path, f"{base}/?token={token}", "--virtual-time-budget=2500", "--dump-dom")
            assert re.search(r'<a id="tb-link" href="%s"[^>]*>TensorBoard</a>' % re.escape(url), dom), \
                dom[:2000]
    finally:
        out, err = release(p, jd)
    assert p.returncode == 0, err[-3000:]
    # a service, stopped with the job (TensorBoard exits 0 on SIGTERM)
    assert task_states(loom, jd)["tensorboard:0"] in ("stopped", "succeeded")

    # After the job: `loom status` and the page give the one-liner, and the
    # one-liner serves the same values from the finished job's directory.
    head, _ = parse_status(loom.run("status", jd.name).stdout)
    m = re.fullmatch(r"(\S+) stopped with the job; 2 runs: (tensorboard --logdir .*)", head["tboard"])
    assert m and m.group(1) == url, head["tboard"]
    cmd = shlex.split(m.group(2))
    assert cmd == ["tensorboard", "--logdir", str(jd / "tensorboard")]
    u, ubase, utoken = start_ui(loom)
    try:
        job = api(ubase, f"job/{jd.name}/api/job", utoken)
        assert job["tensorboard_logdir"] == str(jd / "tensorboard") and job["tensorboard_runs_total"] == 2
        if CHROMIUM:
            dom = chromium(tmp_path, f"{ubase}/job/{jd.name}/?token={utoken}", "--virtual-time-budget=2000",
                           "--dump-dom")
            assert f'<code id="tb-cmd">{m.group(2)}</code>' in dom, dom[:2000]
            assert "TensorBoard stopped with the job (2 runs)" in dom
    finally:
        stop_ui(u)
    tbp, tburl = start_tensorboard([str(tensorboard), *cmd[1:], "--host", "127.0.0.1", "--port", "0",
                                    "--reload_interval", "1"], tmp_path / "tensorboard-after.log")
    try:
        assert wait_served(tburl, want) == served
    finally:
        stop_process_group(tbp)


TF_SCRIPT = '''
import os
import tensorflow as tf
import loom

STEPS = 12
l = loom.Loom()
run = os.path.join(os.environ["LOOM_TENSORBOARD_DIR"], os.environ["LOOM_ROLE"] + "-" + os.environ["LOOM_INDEX"])
w = tf.summary.create_file_writer(run)
with w.as_default():
    for step in range(STEPS):
        loss, accuracy = 2.0 / (step + 1), step / STEPS
        tf.summary.scalar("loss", loss, step=step)
        tf.summary.scalar("accuracy", accuracy, step=step)
        l.metric("loss", step, loss)          # and the same on loom's dashboard
        l.metric("accuracy", step, accuracy)
w.close()
l.close()
print("tf summaries written", flush=True)
'''


def test_tensorboard_role_serves_tensorflow_summaries(loom, tmp_path, tensorboard, tf_python):
    script = tmp_path / "tf_summaries.py"
    script.write_text(TF_SCRIPT)
    env = {"PYTHONPATH": str(ROOT / "python"), "LOOM_LIBRARY": str(LIBLOOM),
           "TF_CPP_MIN_LOG_LEVEL": "2", **pylib_env()}
    spec = loom.spec(f"""
name: tbtf
env: {{{", ".join(f'{k}: "{v}"' for k, v in env.items())}}}
roles:
  tensorboard: {{command: '{tb_role(tensorboard)}'}}
  tf: {{command: [{json.dumps(str(tf_python))}, {json.dumps(str(script))}]}}
  gate: {{command: '{GATE}'}}
""")
    p = loom.popen("run", spec)
    jd = loom.wait_for(lambda: loom.jobs() and loom.jobs()[-1], what="the job directory")
    try:
        url = loom.wait_for(lambda: (jd / "state.json").exists() and loom.state(jd).get("tensorboard"),
                            timeout=60, what="the tensorboard role's URL in state.json")
        loom.wait_for(lambda: task_states(loom, jd)["tf:0"] in ("succeeded", "failed"), timeout=240,
                      what="the TensorFlow task to finish")
        assert task_states(loom, jd)["tf:0"] == "succeeded", (jd / "logs" / "tf-0.log").read_text()[-3000:]
        steps = range(12)
        want = {"tf-0": {"scalars": {"loss": {s: float(np.float32(2.0 / (s + 1))) for s in steps},
                                     "accuracy": {s: float(np.float32(s / 12)) for s in steps}},
                         "histograms": {}, "text": {}}}
        wait_served(url, want)
        # the TensorFlow task's loss and accuracy on loom's dashboard, exact
        base, token = dashboard_of(loom, jd)
        got = {s["tag"]: [pt[:2] for pt in s["points"]]
               for s in api(base, "api/metrics?task=tf:0", token)["series"] if s["source"] == "user"}
        assert got == {"loss": [[s, 2.0 / (s + 1)] for s in steps],
                       "accuracy": [[s, s / 12] for s in steps]}
    finally:
        out, err = release(p, jd)
    assert p.returncode == 0, err[-3000:]
