"""Elastic membership: survivors of a lost worker continue in a new
generation without restarting their processes; a worker that comes back
joins the next generation; below min the job fails."""
import re

from conftest import BUILD

PROBE = BUILD / "tests/system/elasticprobe"


def gens(out, task):
    return [tuple(map(int, m.groups())) for m in
            re.finditer(rf"\[{re.escape(task)}\] GEN (\d+) world=(\d+) rank=(\d+)", out)]


def test_lost_worker_survivors_continue(loom):
    spec = loom.spec(f"""
name: elastic
roles:
  worker:
    instances: 4
    elastic: {{min: 2, max: 4}}
    command: [{PROBE}, "60", "worker:3", "20"]
""")
    r = loom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "membership generation 1, world size 3" in r.stderr
    for w in range(3):
        g = gens(r.stdout, f"worker:{w}")
        assert g[0] == (0, 4, w) and g[-1][:2] == (1, 3), g
        assert f"[worker:{w}] ELASTICDONE task=worker:{w} rc=LOOM_OK gen=1 world=3 step=60" in r.stdout
    st = {t["task"]: t for t in loom.state()["tasks"]}
    assert st["worker:3"]["left"] is True and st["worker:3"]["signal"] == 9
    assert loom.state()["state"] == "succeeded"
    # the survivors' processes were never restarted
    assert all(st[f"worker:{w}"]["attempt"] == 0 for w in range(3))


def test_restarted_worker_rejoins_next_generation(loom):
    spec = loom.spec(f"""
name: elastic2
restart: task
max_restarts: 1
roles:
  worker:
    instances: 4
    elastic: {{min: 2, max: 4}}
    command: [{PROBE}, "80", "worker:2", "15"]
""")
    r = loom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    evs = [e for e in loom.events() if e["event"] == "membership_changed"]
    assert [(e["generation"], e["world_size"]) for e in evs] == [(1, 3), (2, 4)]
    # worker:2's second process started in generation 2 with world 4
    g2 = gens(r.stdout, "worker:2")
    assert g2[0] == (0, 4, 2) and g2[-1][:2] == (2, 4), g2
    for w in range(4):
        assert re.search(rf"\[worker:{w}\] ELASTICDONE .* rc=LOOM_OK gen=2 world=4 step=80",
                         r.stdout), w


def test_below_min_fails_the_job(loom):
    # 4 workers, min 3: losing worker:3 leaves 3 (= min), and the survivors
    # go on in generation 1; losing worker:1 then leaves 2 (< min), and that
    # fails the job. Without elastic handling the first loss would fail it
    # (root cause worker:3); without the min check the second would start
    # generation 2.
    spec = loom.spec(f"""
name: elastic3
roles:
  worker:
    instances: 4
    elastic: {{min: 3, max: 4}}
    command: 'if [ "$LOOM_TASK" = worker:1 ]; then (sleep 3; kill -9 $$) & fi; exec {PROBE} 400 worker:3 5'
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    evs = [e for e in loom.events() if e["event"] == "membership_changed"]
    assert [(e["generation"], e["world_size"], e["left"]) for e in evs] == [(1, 3, "worker:3")]
    assert "membership generation 1, world size 3" in r.stderr
    for w in (0, 1, 2):  # the survivors re-formed and trained on in generation 1
        assert gens(r.stdout, f"worker:{w}")[-1][:2] == (1, 3), r.stdout
    # no survivor finished its 400 steps: each either was stopped, or saw
    # the attempt aborted first and said so (ELASTICDONE with LOOM_EABORTED,
    # printed when the abort beat the SIGTERM)
    done = [l for l in r.stdout.splitlines() if "ELASTICDONE" in l]
    assert all("rc=LOOM_OK" not in l and "step=400" not in l for l in done), done
    st = loom.state()
    assert st["state"] == "failed" and st["root_cause"]["task"] == "worker:1", st["root_cause"]
    assert "root cause: worker:1" in r.stderr and "SIGKILL" in r.stderr
    by = {t["task"]: t for t in st["tasks"]}
    assert by["worker:3"]["left"] is True and by["worker:1"]["signal"] == 9
    assert by["worker:1"].get("left") is not True
