#!/usr/bin/python3
"""bench/recovery: how long a job takes from a worker's failure to
training again, for each restart policy, measured from the job's own event
log (events.jsonl timestamps, one clock). The workload is
tests/system/elasticprobe (allreduce steps; it emits a "training_again"
event whenever its collectives work again). One line per figure:

  name=recovery policy=<p> n=<world> bytes=0 median_s=<s> ratio=<goal_s/median_s> goal_s=<g> runs=<k>

ratio is against a stated ceiling, BENCH_GOAL_S (default 1.0 s: training
again within a second of the failure, for every policy); ratio > 1 means
within it (the benchmarks' convention: > 1 is better for loom).

policies: task (restart: task on a job without collectives: until the
failed task's new process runs), job (restart: job + retries: the whole
attempt restarts, until all 4 ranks' collectives work), elastic (the 3
survivors go on without the lost worker, until their collectives work in
the new generation), elastic+task (the survivors go on, the failed worker
restarts and rejoins: until all 4 work in the generation that includes it;
measured from the failure)."""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("LOOM_BUILD_DIR", ROOT / "build"))
LOOM, PROBE = BUILD / "loom", BUILD / "tests/system/elasticprobe"
RUNS = int(os.environ.get("BENCH_RUNS", "5"))
GOAL_S = float(os.environ.get("BENCH_GOAL_S", "1.0"))
N = 4

SPECS = {
    "task": "restart: task\nmax_restarts: 1\nroles:\n  worker: {instances: 4, command: "
            "'if [ $LOOM_INDEX = 3 ] && [ $LOOM_ATTEMPT = 0 ]; then sleep 0.5; kill -KILL $$; fi; "
            "sleep 1.5'}\n",
    "job": "retries: 1\nroles:\n  worker: {instances: 4, command: [PROBE, '40', 'worker:3', '10']}\n",
    "elastic": "roles:\n  worker: {instances: 4, elastic: {min: 2, max: 4}, "
               "command: [PROBE, '40', 'worker:3', '10']}\n",
    "elastic+task": "restart: task\nmax_restarts: 1\nroles:\n  worker: {instances: 4, "
                    "elastic: {min: 2, max: 4}, command: [PROBE, '60', 'worker:3', '10']}\n",
}


def one(policy, tmp):
    home = Path(tmp) / policy
    spec = Path(tmp) / f"{policy}.yaml"
    spec.write_text(f"name: rec\n" + SPECS[policy].replace("PROBE", str(PROBE)))
    r = subprocess.run([str(LOOM), "run", str(spec)], env=dict(os.environ, LOOM_HOME=str(home)),
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise SystemExit(f"{policy}: the job failed:\n{r.stderr[-2000:]}")
    job = next((home / "jobs").iterdir())
    ev = [json.loads(l) for l in (job / "events.jsonl").read_text().splitlines()]
    t_fail = next(e["t"] for e in ev if e["event"] in ("failed", "lost"))
    if policy == "task":
        # no collectives: the restarted task's process is running again
        return next(e["t"] for e in ev if e["event"] == "started" and e["t"] > t_fail) - t_fail
    # training again: every rank of the new world has its collectives back;
    # with a restarted member, in the generation that includes it
    since = t_fail
    if policy == "elastic+task":
        since = max(e["t"] for e in ev if e["event"] == "membership_changed")
        ts = sorted(e["t"] for e in ev if e["event"] == "training_again" and e["t"] > since)
        if len(ts) < N:
            raise SystemExit(f"{policy}: only {len(ts)} ranks reported training again")
        return ts[N - 1] - t_fail
    want = N - 1 if policy == "elastic" else N
    ts = sorted(e["t"] for e in ev if e["event"] == "training_again" and e["t"] > since)
    if len(ts) < want:
        raise SystemExit(f"{policy}: only {len(ts)} ranks reported training again")
    return ts[want - 1] - t_fail


def main():
    if not PROBE.exists():
        raise SystemExit(f"build first: {PROBE} is missing (cmake --build build)")
    with tempfile.TemporaryDirectory() as tmp:
        for policy in SPECS:
            xs = [one(policy, tmp) for _ in range(RUNS)]
            med = statistics.median(xs)
            print(f"name=recovery policy={policy} n={N} bytes=0 median_s={med:.3f} "
                  f"ratio={GOAL_S / med if med > 0 else 0:.2f} min_s={min(xs):.3f} "
                  f"max_s={max(xs):.3f} goal_s={GOAL_S:g} runs={RUNS}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
