"""Jobs on the local backend: where their files and logs go, and what
status/logs/events show. What each task of a multi-role job sees (ranks,
TF_CONFIG, the torch variables), failure, kill and restart are the
backend contract, test_contract.py, run on every backend."""
import json
import os
import re
import threading

from conftest import BUILD, DURATION, LOOM, parse_status, table


def test_logs_status_events(loom):
    spec = loom.spec("""
name: logs
roles:
  worker:
    instances: 2
    command: 'for i in 1 2 3; do echo "out $LOOM_INDEX $i"; echo "err $LOOM_INDEX $i" >&2; done; printf "no newline"'
""")
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stderr
    for i in range(2):
        for k in (1, 2, 3):
            assert f"[worker:{i}] out {i} {k}" in r.stdout.splitlines()
            assert f"[worker:{i}] err {i} {k}" in r.stdout.splitlines()
        assert f"[worker:{i}] no newline" in r.stdout.splitlines()
    job = loom.job_dir().name
    one = loom.run("logs", job, "--task", "worker:1")
    assert one.returncode == 0
    body = [l for l in one.stdout.splitlines() if not l.startswith("=== loom:")]
    assert sorted(body) == sorted([f"out 1 {k}" for k in (1, 2, 3)] +
                                  [f"err 1 {k}" for k in (1, 2, 3)] + ["no newline"])
    both = loom.run("logs", job[:12])  # a unique prefix works
    assert both.returncode == 0 and "[worker:0] out 0 3" in both.stdout
    st = loom.run("status", job)
    assert st.returncode == 0, st.stderr
    head, rows = parse_status(st.stdout)
    assert {k: v for k, v in head.items() if k != "elapsed"} == {
        "job": job, "state": "succeeded", "attempt": "0 (retries 0)", "dir": str(loom.job_dir()),
        "web": loom.state()["dashboard"]}, st.stdout
    assert [(r["TASK"], r["STATE"], r["ATTEMPT"], r["EXIT"], r["REASON"]) for r in rows] == \
        [("worker:0", "succeeded", "0", "0", ""), ("worker:1", "succeeded", "0", "0", "")]
    assert all(r["ADDRESS"] != "-" and r["ELAPSED"] != "-" for r in rows), st.stdout
    lst = loom.run("status")
    assert lst.returncode == 0, lst.stderr
    rows = table(lst.stdout.splitlines(), ("JOB", "STATE", "ATTEMPT", "ELAPSED", "TASKS"))
    assert len(rows) == 1 and re.fullmatch(DURATION, rows[0].pop("ELAPSED")), lst.stdout
    assert rows == [{"JOB": job, "STATE": "succeeded", "ATTEMPT": "0",
                     "TASKS": "2 total, 0 running, 2 done, 0 failed"}]
    ev = loom.run("events", job, "--json")
    names = [json.loads(l)["event"] for l in ev.stdout.splitlines()]
    for n in ("job_started", "registered", "ready", "rendezvous_done", "started", "succeeded",
              "job_finished"):
        assert n in names, n
    # every event carries a time, and attempt numbers
    for l in ev.stdout.splitlines():
        e = json.loads(l)
        assert e["t"] > 1.7e9 and "attempt" in e
    bad = loom.run("logs", "nope-nope")
    assert bad.returncode == 2 and "no job" in bad.stderr


def test_events_follow_and_the_spec_as_the_job_runs_it(loom):
    # loom events --follow prints each event as it comes and returns once
    # the job has ended; status --json --spec adds the spec with --set applied
    gate = loom.tmp / "gate"
    spec = loom.spec(f"""
name: follow
roles:
  worker: {{instances: 2, command: 'while [ ! -e {gate} ]; do sleep 0.05; done; echo done'}}
""")
    r = loom.run("submit", spec, "--set", "roles.worker.env.X=1", timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    f = loom.popen("events", job, "--json", "--follow")
    try:
        lines = []
        while not any(json.loads(l)["event"] == "started" for l in lines):
            line = f.stdout.readline()  # as it comes: the job is still waiting on the gate
            assert line, f.stderr.read()
            lines.append(line)
        assert f.poll() is None
        st = json.loads(loom.run("status", job, "--json", "--spec").stdout)
        assert st["spec"]["name"] == "follow" and st["state"] in ("starting", "running"), st
        assert st["spec"]["roles"]["worker"]["env"] == {"X": "1"}, st["spec"]
        assert st["spec"]["roles"]["worker"]["instances"] == 2, st["spec"]
        gate.touch()
        # the rest through the same buffered reader (communicate() reads the
        # pipe past what readline() has buffered); killed if it never ends
        stop = threading.Timer(30, f.kill)
        stop.start()
        rest, err = f.stdout.read(), f.stderr.read()
        stop.cancel()
        f.wait()
    finally:
        gate.touch()
        if f.poll() is None:
            f.kill()
    assert f.returncode == 0, err
    events = [json.loads(l) for l in lines + rest.splitlines()]
    assert events[-1]["event"] == "job_finished" and events[-1]["outcome"] == "succeeded"
    every = [json.loads(l) for l in loom.run("events", job, "--json").stdout.splitlines()]
    assert events == every  # each once, none cut
    bad = loom.run("status", job, "--spec")
    assert bad.returncode == 2 and "--spec goes with --json" in bad.stderr, bad.stderr
    # an ended job without its event log: --follow waits for a starting
    # coordinator's log (10 s), then says so, exit 3, rather than nothing
    (loom.job_dir() / "events.jsonl").unlink()
    gone = loom.run("events", job, "--json", "--follow", timeout=60)
    assert gone.returncode == 3 and gone.stdout == "", (gone.returncode, gone.stdout)
    assert "no event log at" in gone.stderr and "ended without one" in gone.stderr, gone.stderr


def test_list_command_is_execd_without_shell(loom):
    spec = loom.spec("""
name: argv
roles:
  worker: {command: [echo, '$HOME', 'a  b']}
""")
    r = loom.run("run", spec)
    assert r.returncode == 0
    assert "[worker:0] $HOME a  b" in r.stdout


def test_libloom_kv_and_events_through_a_job(loom):
    probe = BUILD / "tests/system/kvprobe"
    spec = loom.spec(f"""
name: kv
roles:
  chief: {{command: [{probe}]}}
  worker: {{instances: 3, procs: 2, command: [{probe}]}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stdout + r.stderr
    oks = [l for l in r.stdout.splitlines() if "KVOK" in l]
    assert len(oks) == 7
    # sum over ranks of rank*7 = 7 * 21
    assert all(l.endswith("world=7 sum=147") for l in oks), oks
    evs = [e for e in loom.events() if e["event"] == "probe_done"]
    assert sorted(e["rank"] for e in evs) == list(range(7))
    assert all(e["source"] == "user" and e["task"].split(":")[0] in ("chief", "worker")
               for e in evs)


def test_help_describes_every_verb(loom):
    r = loom.run("--help")
    assert r.returncode == 0
    for verb in ("run", "submit", "status", "logs", "events", "kill", "check"):
        assert verb in r.stdout
        h = loom.run(verb, "--help")
        assert h.returncode == 0 and f"usage: loom {verb}" in h.stdout
    r = loom.run("frobnicate")
    assert r.returncode == 2 and "unknown verb" in r.stderr
    c = loom.run("check")
    assert c.returncode == 0, c.stdout
    lines = c.stdout.splitlines()
    assert len(lines) == 5, c.stdout
    assert lines[0] == f"ok   job directory {loom.home}/jobs"
    assert re.fullmatch(rf"ok   backend local: {os.cpu_count()} cores, \d+\.\d GiB memory, \d+ GPUs",
                        lines[1]), lines[1]
    assert lines[2] == "ok   loopback TCP listens"
    # which memory enforcement is in force (test_failure checks each in detail)
    assert re.fullmatch(r"ok   memory limits: (cgroup v2 \(memory\.max under /\S+\)|cgroup v1 "
                        r"\(memory\.limit_in_bytes under /\S+\)|rlimit \(RLIMIT_DATA; no cgroup: .+\))",
                        lines[3]), lines[3]
    assert lines[4] == f"ok   agent executable {LOOM.resolve()}"


def test_resources_beyond_this_machine_are_refused(loom):
    cores = os.cpu_count()
    for key, val, what in (("vcores", cores + 1, f"has {cores} cores"),
                           ("memory", "100000GiB", "GiB of memory"),
                           ("gpus", 64, "gpus per task")):
        spec = loom.spec(f"name: big\nroles:\n  worker: {{command: 'true', {key}: {val}}}\n")
        r = loom.run("run", spec)
        assert r.returncode == 2, (key, r.stderr)
        assert what in r.stderr and "worker" in r.stderr, r.stderr
    assert loom.jobs() == []  # refused before anything started


def test_tensorboard_role_url_is_announced(loom):
    spec = loom.spec("""
name: tb
roles:
  worker: {command: 'sleep 1.5'}
  tensorboard: {command: 'echo "serving $LOOM_TENSORBOARD_DIR on $LOOM_PORT"; exec sleep 60'}
""")
    r = loom.run("run", spec, timeout=60)
    assert r.returncode == 0, r.stderr
    st = loom.state()
    tb = next(t for t in st["tasks"] if t["task"] == "tensorboard:0")
    url = f'http://{tb["host"]}:{tb["port"]}/'
    assert st["tensorboard"] == url and tb["state"] == "stopped"  # a service
    assert f"TensorBoard (tensorboard:0): {url}" in r.stderr
    assert f'serving {loom.job_dir()}/tensorboard on {tb["port"]}' in r.stdout
    assert url in loom.run("status", loom.job_dir().name).stdout
    assert any(e["event"] == "tensorboard_url" and e["url"] == url for e in loom.events())


def test_archives_are_unpacked_into_the_task_directory(loom, tmp_path):
    """archives: a .tar.gz and a .zip, unpacked at their targets for every
    task (on YARN, YARN unpacks them: test_yarn); a source that is not an
    archive is a spec error that says where."""
    import subprocess
    env = tmp_path / "env"
    env.mkdir()
    (env / "mod.py").write_text("print('from the archive')\n")
    subprocess.run(["tar", "-C", str(env), "-czf", str(tmp_path / "py.tar.gz"), "mod.py"], check=True)
    subprocess.run(["zip", "-q", str(tmp_path / "z.zip"), "mod.py"], cwd=env, check=True)
    spec = loom.spec(f"""
name: arch
archives: {{pyenv: {tmp_path}/py.tar.gz, deep/z: {tmp_path}/z.zip}}
roles:
  worker: {{instances: 2, command: "/usr/bin/python3 pyenv/mod.py; cat deep/z/mod.py"}}
""")
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stdout + r.stderr
    for w in ("worker:0", "worker:1"):
        assert f"[{w}] from the archive" in r.stdout
        assert f"[{w}] print('from the archive')" in r.stdout
    (tmp_path / "plain.txt").write_text("x")
    bad = loom.spec(f"name: arch2\narchives: {{a: {tmp_path}/plain.txt}}\n"
                    "roles:\n  w: {command: 'true'}\n", name="bad.yaml")
    r = loom.run("run", bad)
    assert r.returncode == 2
    assert "bad.yaml:2" in r.stderr and "archives.a: source" in r.stderr and \
        "must be a file ending in .tar.gz, .tgz, .tar or .zip" in r.stderr, r.stderr
    bad = loom.spec(f"name: arch3\narchives: {{a: {tmp_path}/py.tar.gz}}\n"
                    f"files: {{a: {tmp_path}/plain.txt}}\nroles:\n  w: {{command: 'true'}}\n",
                    name="bad2.yaml")
    r = loom.run("run", bad)
    assert r.returncode == 2 and "files.a: archives has a target of the same name" in r.stderr, \
        r.stderr


def test_python_ships_an_environment_archive_first_on_the_path(loom, tmp_path):
    """python: ENV.tar.gz: a virtualenv packed with tar (as venv-pack
    does) is unpacked at loom-env in each task's directory and its bin/
    leads the task's PATH, so `python` is the environment's: its own
    package imports and sys.prefix is the unpacked copy; the spec's own
    PATH stays behind it. "auto", a missing archive, and a target that
    archives already takes are spec errors that say what to do."""
    import subprocess
    import sys
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "only_in_env.py").write_text("WHERE = 'the shipped environment'\n")
    subprocess.run(["tar", "-C", str(venv), "-czf", str(tmp_path / "env.tar.gz"), "."],
                   check=True)
    spec = loom.spec(f"""
name: pyenv
python: {tmp_path}/env.tar.gz
env: {{PATH: "/usr/bin:/bin"}}
roles:
  worker:
    instances: 2
    command: python -c "import only_in_env, sys, os; print(only_in_env.WHERE, sys.prefix == os.path.realpath('loom-env'), os.environ['PATH'].split(':')[1:])"
""")
    r = loom.run("run", spec)
    assert r.returncode == 0, r.stdout + r.stderr
    for w in ("worker:0", "worker:1"):
        assert f"[{w}] the shipped environment True ['/usr/bin', '/bin']" in r.stdout, r.stdout
    for text, words in (
            ("python: auto\n", "python: auto packs the caller's virtualenv"),
            (f"python: {tmp_path}/nope.tar.gz\n", "python: source"),
            (f"python: {tmp_path}/env.tar.gz\narchives: {{loom-env: {tmp_path}/env.tar.gz}}\n",
             "python: its environment goes to loom-env, which archives names already")):
        bad = loom.spec(f"name: pyenv2\n{text}roles:\n  w: {{command: 'true'}}\n",
                        name="badpy.yaml")
        r = loom.run("run", bad)
        assert r.returncode == 2 and words in r.stderr and "badpy.yaml:" in r.stderr, r.stderr
