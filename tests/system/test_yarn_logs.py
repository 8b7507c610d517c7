"""Logs where Hadoop users look (issue 31 item 3): each task's output is
also in its container's log directory, stdout to `stdout` and stderr to
`stderr`, as YARN users expect (the NodeManager's yarn.nodemanager.log-dirs,
what `yarn logs` and the ResourceManager UI's log links show)."""


def test_each_tasks_output_is_in_its_containers_log_files(yloom, yarn):
    s = yloom.spec("""
name: ylogs
backend: yarn
roles:
  chief: {command: 'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2'}
  worker:
    instances: 2
    command: 'echo "OUT-$LOOM_TASK"; echo "ERR-$LOOM_TASK" >&2; echo "OUT2-$LOOM_TASK"'
""")
    r = yloom.run("run", s, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    apps = [a["id"] for a in yarn.apps() if a["name"] == "ylogs"]
    assert len(apps) == 1, apps
    app = apps[0]
    containers = sorted(yarn.dir.glob(f"nm*/logs/{app}/container_*"))
    tasks = ["chief:0", "worker:0", "worker:1"]
    assert len(containers) == len(tasks), containers
    seen = {}
    for c in containers:
        out = (c / "stdout").read_text()
        err = (c / "stderr").read_text()
        mine = [t for t in tasks if f"OUT-{t}\n" in out]
        assert len(mine) == 1, (c, out)  # one task per container, its lines only
        t = mine[0]
        seen[t] = c
        assert f"ERR-{t}\n" in err and f"ERR-{t}" not in out, (c, out, err)
        assert f"OUT-{t}" not in err, (c, err)
        if t.startswith("worker"):  # in order
            assert out.index(f"OUT-{t}\n") < out.index(f"OUT2-{t}\n"), out
    assert sorted(seen) == tasks, seen
