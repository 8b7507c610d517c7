"""TensorFlow's ParameterServerStrategy under loom (examples/tf-ps): the
chief coordinates, 2 workers and 2 ps serve, an evaluator evaluates each
checkpoint. Each test runs the example's own job.yaml, with fewer steps.

- the variables are split over both ps, training makes progress, the
  evaluator writes metrics (and TensorBoard summaries) for the checkpoints,
  and the services are stopped once the chief and the evaluator are done;
- a worker SIGKILLed mid-training is restarted alone (`restart: task`),
  comes back at the address TensorFlow's coordinator knows, and runs
  training steps again (its own log: TensorFlow prints each step on the
  worker that executes it), while the chief reaches its last step;
- a ps SIGKILLed mid-training fails the attempt (loom's default `restart:
  job`: a ps cannot come back with its variables), and the retried attempt
  resumes from the last checkpoint."""
import json
import os
import re
import signal
import subprocess
from pathlib import Path

from conftest import LIBLOOM, ROOT

SPEC = ROOT / "examples" / "tf-ps" / "job.yaml"
CLOSURE = re.compile(r"^tfps-closure step (\d+)$")


def run_job(loom, tf_python, steps, *sets, kill=None, then=None, timeout=480):
    """Runs the example with the chief at `steps` steps (a checkpoint every
    50). kill=(task, at_step): once the chief's checkpoint manager has
    recorded checkpoint at_step or a later one, SIGKILL the task's process,
    then call then() if given. Returns (loom run's result, job directory,
    the killed task's state row before the kill, then()'s value). The
    timeout is generous: in CI six TensorFlow processes share 2 cores with
    the other system-test pass."""
    env = {"LOOM_TF_PYTHON": str(tf_python), "LOOM_LIBRARY": str(LIBLOOM)}
    cmd = f"exec ${{LOOM_TF_PYTHON}} train.py --steps {steps} --ckpt-every 50"
    args = ["run", SPEC, "--set", f"roles.chief.command={cmd}"]
    for s in sets:
        args += ["--set", s]
    if not kill:
        return loom.run(*args, timeout=timeout, env=env), loom.job_dir(), None, None
    p = loom.popen(*args, env=env)
    try:
        task, at = kill
        loom.wait_for(lambda: loom.jobs() and latest_checkpoint(loom.job_dir()) >= at,
                      timeout=timeout / 2, what=f"checkpoint {at}")
        row = next(t for t in loom.state()["tasks"] if t["task"] == task)
        pid = row["pids"][0]
        assert b"train.py" in Path(f"/proc/{pid}/cmdline").read_bytes()  # exec: the program itself
        os.kill(pid, signal.SIGKILL)
        got = then() if then else None
        out, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), loom.job_dir(), row, got


def latest_checkpoint(jd):
    """The step of the checkpoint the chief's CheckpointManager last
    recorded as complete (its `checkpoint` file), or -1."""
    try:
        text = (jd / "ckpt" / "tf-ps" / "checkpoint").read_text()
    except OSError:
        return -1
    m = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M)
    return int(m.group(1)) if m else -1


def chief_result(jd, attempt):
    return json.loads((jd / "output" / "tf-ps" / f"chief-attempt-{attempt}.json").read_text())


def eval_metrics(jd):
    lines = (jd / "output" / "tf-ps" / "eval.jsonl").read_text().splitlines()
    return [json.loads(l) for l in lines]


def log_attempts(jd, task):
    """A task's log split at loom's attempt markers: {attempt: [lines]}."""
    out, cur = {}, None
    for l in (jd / "logs" / f"{task.replace(':', '-')}.log").read_text().splitlines():
        m = re.match(r"=== loom: \S+ attempt (\d+),", l)
        if m:
            cur = int(m.group(1))
            out[cur] = []
        elif cur is not None:
            out[cur].append(l)
    return out


def served_at(lines):
    return [m.group(1) for l in lines for m in [re.search(r"server up at (\S+)", l)] if m]


def test_variables_on_both_ps_and_evaluator_metrics(loom, tf_python):
    r, jd, _, _ = run_job(loom, tf_python, 200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    res = chief_result(jd, 0)
    # every variable is split in two: one shard on each ps
    for name in ("w1", "b1", "w2", "b2"):
        devs = res["variable_devices"][name]
        assert len(devs) == 2, (name, devs)
        assert devs[0].startswith("/job:ps/replica:0/task:0/"), (name, devs)
        assert devs[1].startswith("/job:ps/replica:0/task:1/"), (name, devs)
    assert res["variable_devices"]["global_step"][0].startswith("/job:ps/replica:0/task:")
    assert (res["workers"], res["ps"]) == (2, 2)
    # training made progress: every step done, the loss down from the first 50 steps'
    assert res["resumed_from_step"] == 0 and res["steps_done"] == 200
    assert res["checkpoints"] == [50, 100, 150, 200]
    assert res["loss_last"] < 0.8 * res["loss_first"], res["losses"]
    # both workers ran steps (TensorFlow prints each on the worker that runs it)
    ran = {w: [int(m.group(1)) for l in log_attempts(jd, w)[0] for m in [CLOSURE.match(l)] if m]
           for w in ("worker:0", "worker:1")}
    assert ran["worker:0"] and ran["worker:1"], {w: len(s) for w, s in ran.items()}
    assert len(ran["worker:0"]) + len(ran["worker:1"]) == 200  # one line a step
    # the evaluator: each checkpoint it saw, the final one included, values in range
    ms = eval_metrics(jd)
    steps = [m["step"] for m in ms]
    assert steps == sorted(set(steps)) and set(steps) <= {50, 100, 150, 200} and steps[-1] == 200
    for m in ms:
        assert m["examples"] == 2000 and Path(m["checkpoint"]).name == f"ckpt-{m['step']}"
        assert 0.05 < m["loss"] < 2.5 and 0.3 < m["accuracy"] <= 1.0, m
    assert ms[-1]["accuracy"] > 0.6, ms
    # its TensorBoard summaries, read back by TensorBoard's own reader
    tb = jd / "tensorboard" / "evaluator-0"
    read = subprocess.run(
        [str(tf_python), "-c",
         "import json, sys\n"
         "from tensorboard.backend.event_processing import event_accumulator as ea\n"
         "a = ea.EventAccumulator(sys.argv[1], size_guidance={ea.TENSORS: 0}); a.Reload()\n"
         "from tensorboard.util.tensor_util import make_ndarray\n"
         "print(json.dumps({t: [[e.step, float(make_ndarray(e.tensor_proto))] "
         "for e in a.Tensors(t)] for t in a.Tags()['tensors']}))", str(tb)],
        capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr[-2000:]
    summ = json.loads(read.stdout.splitlines()[-1])
    assert [s for s, _ in summ["eval/accuracy"]] == steps
    assert [round(v, 4) for _, v in summ["eval/accuracy"]] == [round(m["accuracy"], 4)
                                                              for m in ms]
    # the chief's loss and the evaluator's metrics reached loom's dashboard
    dash = {}
    for e in loom.events():
        if e["event"] == "metric" and e.get("source") == "user":
            dash.setdefault((e["task"], e["tag"]), []).append((e["step"], e["value"]))
    assert [s for s, _ in dash[("chief:0", "loss")]] == [50, 100, 150, 200], dash
    assert [(s, round(v, 6)) for s, v in dash[("evaluator:0", "eval/accuracy")]] == \
        [(m["step"], round(m["accuracy"], 6)) for m in ms]
    # the chief and the evaluator finished; workers and ps were stopped as services
    st = {t["task"]: t for t in loom.state()["tasks"]}
    assert st["chief:0"]["state"] == "succeeded" and st["evaluator:0"]["state"] == "succeeded"
    for t in ("worker:0", "worker:1", "ps:0", "ps:1"):
        assert st[t]["state"] == "stopped" and st[t]["signal_name"] == "TERM", st[t]
    ev = [e["event"] for e in loom.events() if e["event"] != "metric"]
    assert ev.index("finishing_roles_done") < ev.index("stopped")
    assert "failed" not in ev and "restarting" not in ev


def test_worker_killed_is_restarted_and_tf_schedules_on_it(loom, tf_python):
    steps = 1500
    r, jd, before, _ = run_job(loom, tf_python, steps, kill=("worker:1", 50))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "worker:1 killed by signal 9 (SIGKILL): restarting it (1 of 2)" in r.stderr
    restarting = [e for e in loom.events() if e["event"] == "restarting"]
    assert [(e["task"], e["attempt"], e["restart"]) for e in restarting] == [("worker:1", 0, 1)]
    st = {t["task"]: t for t in loom.state()["tasks"]}
    assert (st["worker:1"]["attempt"], st["worker:1"]["restarts"]) == (1, 1)
    assert all(st[t]["restarts"] == 0 for t in st if t != "worker:1")
    assert loom.state()["attempt"] == 0  # the job itself did not restart
    # the chief did every step in one attempt
    res = chief_result(jd, 0)
    assert res["resumed_from_step"] == 0 and res["steps_done"] == steps
    assert "Worker /job:worker/replica:0/task:1 failed" in (jd / "logs" / "chief-0.log").read_text()
    # the restarted worker serves where TensorFlow's coordinator looks for it:
    # the address of its first attempt (loom gave it a new port: see train.py)
    logs = log_attempts(jd, "worker:1")
    assert sorted(logs) == [0, 1]
    first = f"{before['host']}:{before['port']}"
    assert served_at(logs[0]) == [first] and served_at(logs[1]) == [first]
    # ...and TensorFlow's coordinator scheduled steps on it again after its restart
    before_kill = [int(m.group(1)) for l in logs[0] for m in [CLOSURE.match(l)] if m]
    after = [int(m.group(1)) for l in logs[1] for m in [CLOSURE.match(l)] if m]
    assert before_kill and len(after) >= 10, (len(before_kill), len(after))
    assert min(after) > max(before_kill) and max(after) <= steps


def test_ps_killed_fails_the_attempt_and_the_retry_resumes(loom, tf_python):
    steps = 600

    def last_of_attempt0():
        # once loom has failed attempt 0 and before attempt 1's chief (a
        # fresh TensorFlow process) can save anything
        loom.wait_for(lambda: any(e["event"] == "attempt_failed" for e in loom.events()),
                      timeout=60, what="attempt 0 to fail")
        return latest_checkpoint(loom.job_dir())

    # job.yaml: restart: task for the job, restart: job for the ps role, so
    # a lost ps fails the attempt, and retries: 1 retries it
    r, jd, _, last = run_job(loom, tf_python, steps, kill=("ps:1", 100),
                             then=last_of_attempt0)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "attempt 1 failed: ps:1: killed by signal 9 (SIGKILL)" in r.stderr
    assert "retrying the job: attempt 2 of 2" in r.stderr
    failed = [e for e in loom.events() if e["event"] == "attempt_failed"]
    assert [(e["task"], e["attempt"], e["reason"]) for e in failed] == \
        [("ps:1", 0, "killed by signal 9 (SIGKILL)")]
    assert loom.state()["attempt"] == 1 and loom.state()["state"] == "succeeded"
    # attempt 0's chief never finished; attempt 1's resumed from the last
    # checkpoint attempt 0 completed, and finished
    assert not (jd / "output" / "tf-ps" / "chief-attempt-0.json").exists()
    res = chief_result(jd, 1)
    assert last >= 100 and res["resumed_from_step"] == last, (last, res)
    assert Path(res["resumed_from"]).name == f"ckpt-{last}"
    assert res["steps_done"] == steps and res["steps_this_attempt"] == steps - last
    assert res["checkpoints"] == list(range(last + 50, steps + 1, 50))
    assert res["loss_first"] < 0.95, res["losses"]  # trained weights: a fresh model is at ~1.2
    # the evaluator went on in attempt 1 without evaluating a checkpoint twice
    ms = eval_metrics(jd)
    assert len({m["checkpoint"] for m in ms}) == len(ms) and ms[-1]["step"] == steps
