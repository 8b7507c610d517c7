"""Chaos on the demo: Fashion-MNIST trained by 4 processes while workers are
SIGKILLed. With restart: task the killed worker comes back and the job
completes; with elastic membership the survivors go on without it; either
way the test accuracy stays within 0.5 points of a run without faults
(every step uses the same global batch whoever computes it). SIGKILL of
the coordinator leaves nothing, and running the job again resumes from its
checkpoints."""
import json
import os
import random
import signal
import time

import pytest

from conftest import BUILD, loom_pids_of

MLP = BUILD / "examples/fashion-mnist/mlp"
EPOCHS = 4

pytestmark = pytest.mark.skipif(not MLP.exists(), reason="the example is not built")


def spec_text(name, extra="", worker_extra="", args=()):
    cmd = ", ".join(["./mlp", "--epochs", str(EPOCHS), "--json", *args])
    return f"""
name: {name}
env: {{OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}}
files: {{mlp: {MLP}}}
{extra}
roles:
  chief: {{command: [{cmd}]}}
  worker: {{instances: 3, {worker_extra} command: [{cmd}]}}
"""


def accuracy(stdout):
    line = next(l for l in stdout.splitlines() if l.startswith("[chief:0] {"))
    return json.loads(line.split(" ", 1)[1])["test_accuracy"]


def running_workers(loom, jd):
    try:
        st = json.loads((jd / "state.json").read_text())
    except (OSError, ValueError):
        return []
    return [t for t in st["tasks"] if t["role"] == "worker" and t["state"] == "running"
            and t.get("pids") and not t.get("left")]


def run_with_kills(loom, spec, after_epochs):
    """Runs the job and SIGKILLs a random running worker each time the
    chief's log reports one of after_epochs done: faults during training,
    whatever the machine's speed."""
    p = loom.popen("run", spec)
    loom.wait_for(lambda: loom.jobs(), what="the job")
    jd = loom.jobs()[-1]
    done = 0
    rng = random.Random(7)
    pending = list(after_epochs)
    log = jd / "logs" / "chief-0.log"
    while p.poll() is None and pending:
        time.sleep(0.05)
        text = log.read_text() if log.exists() else ""
        if f"epoch {pending[0]}:" not in text:
            continue
        ws = running_workers(loom, jd)
        if ws:
            victim = rng.choice(ws)
            os.kill(victim["pids"][0], signal.SIGKILL)
            done += 1
            pending.pop(0)
    out, err = p.communicate(timeout=300)
    return p.returncode, out, err, done, jd


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The accuracy of the same job without faults."""
    import subprocess
    tmp = tmp_path_factory.mktemp("ref")
    spec = tmp / "ref.yaml"
    spec.write_text(spec_text("ref", args=["--no-ckpt"]))
    r = subprocess.run([str(BUILD / "loom"), "run", str(spec)], capture_output=True, text=True,
                       env=dict(os.environ, LOOM_HOME=str(tmp / "home")), timeout=300)
    assert r.returncode == 0, r.stderr
    return accuracy(r.stdout)


def test_restart_task_under_repeated_kills(loom, reference):
    spec = loom.spec(spec_text("chaos", "restart: task\nmax_restarts: 5", args=["--no-ckpt"]))
    rc, out, err, kills, jd = run_with_kills(loom, spec, after_epochs=[1, 2, 3])
    assert rc == 0, err[-3000:]
    assert kills == 3, "the job ended before the faults"
    restarts = [e for e in loom.events(jd) if e["event"] == "restarting"]
    assert len(restarts) == kills
    acc = accuracy(out)
    assert abs(acc - reference) <= 0.005, (acc, reference)
    assert "membership generation" in out


def test_elastic_worker_never_comes_back(loom, reference):
    spec = loom.spec(spec_text("chaos-el", worker_extra="elastic: {min: 2, max: 3},",
                               args=["--no-ckpt"]))
    rc, out, err, kills, jd = run_with_kills(loom, spec, after_epochs=[1])
    assert rc == 0, err[-3000:]
    assert kills == 1
    ch = [e for e in loom.events(jd) if e["event"] == "membership_changed"]
    assert len(ch) == 1 and ch[0]["world_size"] == 3
    acc = accuracy(out)
    assert abs(acc - reference) <= 0.005, (acc, reference)


def test_coordinator_sigkill_then_resume(loom, tmp_path):
    ckpt = tmp_path / "ckpt"
    spec = loom.spec(spec_text("chaos-co", args=["--ckpt", str(ckpt)]))
    p = loom.popen("run", spec)
    loom.wait_for(lambda: ckpt.exists() and len(list(ckpt.glob("ckpt-*.ckpt"))) >= 2,
                  timeout=120, what="two epochs' checkpoints")
    t0 = time.time()
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=10)
    loom.wait_for(lambda: loom_pids_of(loom.home) == [], timeout=5, what="every process gone")
    assert time.time() - t0 < 5
    r = loom.run("run", spec, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mlp: resuming from the checkpoint" in r.stdout
    assert accuracy(r.stdout) > 0.8
