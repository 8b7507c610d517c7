"""The spark backend on a real Spark (pyspark 4.3.0 from PyPI, in
.venv-spark/ that scripts/setup-spark.sh makes): a standalone Master and two
Workers started here through spark-class (the wheel has no
start-master.sh), one core each, Java 17; and local-cluster[2,1,1024] where
separate executor processes are all a test needs. The standalone Workers
see the loom build directories empty (hidden.wrap_builds): tasks there run
the binary loom.spark shipped. Each test runs one Spark
driver (tests/system/spark/driver.py) that calls loom.spark.run(spark,
spec) and reports what it returned and what Spark's REST API saw.

Checked: every role runs as one barrier stage, each task's agent a child
of a Spark executor; output streams to the driver prefixed; services stop
when the finishing roles succeed; preflight refusals before anything
starts; task restarts and job retries inside the one stage; an executor
killed mid-job makes Spark relaunch the stage, which runs the next loom
attempt, while an agent of the earlier stage attempt is refused; a
timeout, an exception in the driver and `loom kill` stop the job and leave
no process behind."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import hidden
from conftest import BUILD, LOOM, ROOT, SANITIZED, loom_pids_of

SPARK_PYTHON = Path(os.environ.get("LOOM_SPARK_PYTHON", ROOT / ".venv-spark" / "bin" / "python"))
DRIVER = Path(__file__).parent / "spark" / "driver.py"

pytestmark = pytest.mark.skipif(not SPARK_PYTHON.exists(),
                                reason=f"no Spark environment at {SPARK_PYTHON}: run "
                                       "scripts/setup-spark.sh")


def free_ports(n):
    """n distinct free ports (held open together while they are chosen, so
    that no two are the same: a Worker's UI on the Master's UI port once
    answered the fixture's /json/ with its HTML)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def spark_home():
    out = subprocess.run([str(SPARK_PYTHON), "-c", "import pyspark, os; "
                          "print(os.path.dirname(pyspark.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def spark_env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    e.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=str(SPARK_PYTHON),
             PYSPARK_DRIVER_PYTHON=str(SPARK_PYTHON), SPARK_LOCAL_IP="127.0.0.1",
             SPARK_LOCAL_HOSTNAME="localhost",
             # the standalone Master's and Workers' JVMs, as driver.py's
             SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return e


def wait_for(cond, what, timeout=90):
    """cond()'s first true value within timeout seconds. A file cond reads
    that is not there yet (state.json just after coord.json) is the
    condition not met yet, not an error."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            v = cond()
        except FileNotFoundError:
            v = None
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop_daemons(procs):
    """Stops the Spark daemons started in sessions of their own: SIGTERM,
    then SIGKILL to those still there after 20 s."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def per_epoch(stdout):
    """{epoch: [rows, byte sum]} over every feedtask.py's FEED lines."""
    got = {}
    for epoch, rows, total in re.findall(r"FEED task=\S+ epoch=(\d+) rows=(\d+) sum=(\d+)",
                                         stdout):
        e = got.setdefault(int(epoch), [0, 0])
        e[0] += int(rows)
        e[1] += int(total)
    return got


def mixed_totals(stdout):
    """(rows, byte sum, the C task's records and bytes) read by the Python
    worker:0 (FEED lines) and the C chief:0 (feedprobe --sum's FEEDOK)."""
    py = [(int(a), int(b)) for a, b in
          re.findall(r"FEED task=worker:0 epoch=\d+ rows=(\d+) sum=(\d+)", stdout)]
    c = re.findall(r"FEEDOK task=chief:0 records=(\d+) bytes=(\d+) .*epochs=2 .*sum=(\d+)",
                   stdout)
    assert py and len(c) == 1, stdout[-2000:]
    recs, nbytes, csum = map(int, c[0])
    return sum(a for a, _ in py) + recs, sum(b for _, b in py) + csum, recs, nbytes


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone Master and two Workers (1 core, 1 GiB each). Each
    Worker runs in a mount namespace of its own in which the loom build
    directories are empty (hidden.wrap_builds): its executors, and the
    agents and tasks they start, run only the loom binary loom.spark
    shipped them (SparkContext.addFile), as on a cluster whose nodes have
    no loom. The checkout's python/ and the Spark environment stay
    visible."""
    d = tmp_path_factory.mktemp("spark")
    # libloom.so (and the libloom-deps/ its run path names) where a node
    # with the loom package installed has it, outside the build
    # directories: what a feed task's `import loom` loads there (shipping
    # the Python side is not loom.spark's yet)
    lib = d / "lib"
    lib.mkdir()
    shutil.copy2(BUILD / "libloom.so", lib / "libloom.so")
    if (BUILD / "libloom-deps").is_dir():
        shutil.copytree(BUILD / "libloom-deps", lib / "libloom-deps")
    env = spark_env()
    cls = str(spark_home() / "bin" / "spark-class")
    port, ui, wui1, wui2 = free_ports(4)
    master = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                              env=env, stdout=open(d / "master.log", "w"),
                              stderr=subprocess.STDOUT, start_new_session=True)]
    for i, wui in ((1, wui1), (2, wui2)):
        (d / f"w{i}").mkdir()
        procs.append(subprocess.Popen(
            hidden.wrap_builds(
                [cls, "org.apache.spark.deploy.worker.Worker", "-c", "1", "-m", "1g", "--host",
                 "127.0.0.1", "--webui-port", str(wui), "--work-dir", str(d / f"w{i}"),
                 master], build=BUILD), env=env, stdout=open(d / f"worker{i}.log", "w"),
            stderr=subprocess.STDOUT, start_new_session=True))

    def alive_workers():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                return len([w for w in json.loads(r.read())["workers"]
                            if w["state"] == "ALIVE"]) == 2
        except (OSError, ValueError, KeyError):  # not up yet: no answer, or not its JSON yet
            return False
    try:
        wait_for(alive_workers, "the Master to have its 2 Workers", 120)
        yield {"master": master, "dir": d, "hidden": hidden.build_dirs(BUILD),
               "library": lib / "libloom.so"}
    finally:
        stop_daemons(procs)


class Driver:
    """One Spark driver process running loom.spark.run."""

    def __init__(self, loom, cfg, env_extra=None, prefix=()):
        self.loom = loom
        cfgp = loom.tmp / f"driver-{time.monotonic_ns()}.json"
        cfgp.write_text(json.dumps(cfg))
        env = spark_env()
        env.update(env_extra or {})
        env.update(LOOM_HOME=str(loom.home), LOOM_BIN=str(LOOM), NO_COLOR="1",
                   PYTHONPATH=str(ROOT / "python"))
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        self.log = loom.tmp / "driver.log"
        self.p = subprocess.Popen([*prefix, str(SPARK_PYTHON), str(DRIVER), str(cfgp)], env=env,
                                  stdout=subprocess.PIPE, stderr=open(self.log, "w"), text=True,
                                  start_new_session=True)

    def result(self, timeout=300):
        out, _ = self.p.communicate(timeout=timeout)
        lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
        assert lines, f"the driver printed no RESULT (exit {self.p.returncode}):\n{out}\n" \
                      f"{self.log.read_text()[-3000:]}"
        self.stdout = out
        return json.loads(lines[-1][7:])

    def next_result(self, timeout=300):
        """The next run's RESULT of a driver given several runs, as it
        comes (the driver goes on with the next run)."""
        import queue
        import threading
        if not hasattr(self, "lines"):
            self.lines, self.seen = queue.Queue(), []

            def read():
                for l in self.p.stdout:
                    self.lines.put(l)
                self.lines.put(None)
            threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                l = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                l = ""
            if l is None or (l == "" and time.monotonic() >= deadline):
                raise AssertionError(
                    f"the driver printed no further RESULT (exit {self.p.poll()}):\n"
                    f"{''.join(self.seen)[-3000:]}\n{self.log.read_text()[-3000:]}")
            if l:
                self.seen.append(l)
                if l.startswith("RESULT "):
                    return json.loads(l[7:])

    def stop(self):
        """Ends the driver (its session: the executors with it) if it still
        runs."""
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def job_dir(loom):
    jobs = wait_for(lambda: list((loom.home / "jobs").glob("*/coord.json")), "a job directory")
    return jobs[0].parent


def state(jd):
    return json.loads((jd / "state.json").read_text())


def events(jd):
    return [json.loads(l) for l in (jd / "events.jsonl").read_text().splitlines() if l.strip()]


def procs_with_env(marker: bytes):
    """Pids of live processes whose environment holds marker."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if marker in (p / "environ").read_bytes():
                    st = (p / "stat").read_text()
                    if st.split(")")[-1].split()[0] != "Z":
                        out.append(int(p.name))
            except OSError:
                pass
    return out


def ancestors(pid):
    """(pid, command line) of pid's ancestors, nearest first."""
    out = []
    while pid > 1:
        try:
            st = Path(f"/proc/{pid}/stat").read_text()
            pid = int(st.split(")")[-1].split()[1])
            out.append((pid, Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                        .decode(errors="replace")))
        except OSError:
            break
    return out


def nothing_left(jd):
    """No process of the job is left: agents (LOOM_SECRET) and tasks
    (LOOM_JOB_ID)."""
    secret = (jd / "secret").read_text().strip()
    job = jd.name
    left = wait_for(lambda: not procs_with_env(f"LOOM_SECRET={secret}".encode()) and
                    not procs_with_env(f"LOOM_JOB_ID={job}".encode()) and [True],
                    "every agent and task of the job to be gone", 30)
    return left


# ---- a whole job with every role ---------------------------------------------

def test_every_role_runs_in_one_barrier_stage_on_a_standalone_cluster(loom, standalone):
    """A chief and a ps (2 Workers of 1 core hold 2 tasks) in one barrier
    stage: each agent runs inside a Spark executor, the chief sees its
    TF_CONFIG, the output streams to the driver prefixed, and the ps, a
    service, is stopped once the chief succeeds."""
    spec = {"name": "sparkroles", "roles": {
        "chief": {"command": "echo CHIEF $LOOM_TASK rank=$LOOM_RANK tf=$TF_CONFIG; "
                             "echo PPID $PPID; sleep 2; echo BYE"},
        "ps": {"command": "echo PS up $LOOM_TASK; sleep 300"}}}
    d = Driver(loom, {"master": standalone["master"], "spec": spec})
    jd = job_dir(loom)
    st = wait_for(lambda: (s := state(jd))["state"] == "running" and s, "the job running")
    # every task's agent runs inside a Spark executor (its Python worker)
    for t in st["tasks"]:
        chain = " | ".join(c for _, c in ancestors(t["agent_pid"]))
        assert "CoarseGrainedExecutorBackend" in chain, chain
        assert "pyspark" in chain, chain
    r = d.result()
    assert r.get("exit_code") == 0 and r["state"] == "succeeded", r
    # the output, prefixed as on every backend, streamed to the driver
    assert re.search(r"^\[chief:0\] CHIEF chief:0 rank=0 tf=\{", r["stdout"], re.M), r["stdout"]
    assert "[ps:0] PS up ps:0" in r["stdout"], r["stdout"]
    tf = json.loads(re.search(r"tf=(\{.*\})", r["stdout"])[1])
    assert tf["task"] == {"type": "chief", "index": 0} and set(tf["cluster"]) == {"chief", "ps"}
    final = state(jd)
    by = {t["task"]: t for t in final["tasks"]}
    assert by["chief:0"]["state"] == "succeeded"
    assert by["ps:0"]["state"] == "stopped", by["ps:0"]  # the service, stopped
    # one Spark job, one stage of 2 tasks, complete; each Spark task ran its
    # agent once and ended when the coordinator was gone (exit 3)
    stages = [s for s in r["spark_stages"] if s["tasks"] == 2]
    assert len(stages) == 1 and stages[0]["status"] == "COMPLETE", r["spark_stages"]
    assert all(j["status"] == "SUCCEEDED" for j in r["spark_jobs"]), r["spark_jobs"]
    assert sorted(t["task"] for t in r["spark_tasks"]) == ["chief:0", "ps:0"], r["spark_tasks"]
    assert all(t["runs"] == 1 for t in r["spark_tasks"]), r["spark_tasks"]
    nothing_left(jd)


def test_tasks_on_a_standalone_cluster_run_the_shipped_binary_with_the_build_hidden(
        loom, standalone):
    """The Workers see the loom build directories empty (the fixture's
    hidden.wrap_builds): each task finds no loom there, and the loom
    binary of its agent (every ancestor's executable, from the task and
    from here) is the copy Spark fetched into the Worker's directory
    (SparkContext.addFile), not one under a build directory; the job
    runs to its end all the same."""
    # those hidden when the Workers started that are still here (another
    # build's /tmp/build-* may have gone since)
    builds = [str(b) for b in standalone["hidden"] if b.is_dir()]
    assert str(BUILD.resolve()) in builds, builds
    probe = (f"for d in {' '.join(builds)}; do "
             "if test -e $d/loom; then echo SEEN $d/loom; exit 3; fi; "
             "echo \"LS $d [$(ls -A $d | tr '\\n' ' ')]\"; done; "
             "p=$$; chain=; while [ \"$p\" -gt 1 ]; do "
             "chain=\"$chain $(readlink /proc/$p/exe)\"; "
             "p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2); done; "
             "echo \"CHAIN$chain\"")
    spec = {"name": "sparkhidden", "roles": {
        "worker": {"instances": 2, "command": probe + "; sleep 3"}}}
    d = Driver(loom, {"master": standalone["master"], "spec": spec})
    try:
        jd = job_dir(loom)
        st = wait_for(lambda: (s := state(jd))["state"] == "running" and
                      all(t.get("agent_pid") for t in s["tasks"]) and s, "the job running")
        # from here: each agent's own view of the build directories is
        # empty, and its executable is none of theirs
        for t in st["tasks"]:
            pid = t["agent_pid"]
            exe = os.readlink(f"/proc/{pid}/exe")
            assert exe.endswith("/loom") and exe.startswith(str(standalone["dir"])), (t, exe)
            for b in builds:
                assert not hidden._under(exe, b), (exe, b)
                assert os.listdir(f"/proc/{pid}/root{b}") == [], (pid, b)
        r = d.result()
    finally:
        d.stop()
    assert r.get("exit_code") == 0 and r["state"] == "succeeded", (r, r.get("stdout"))
    out = r["stdout"]
    assert "SEEN" not in out, out
    for task in ("worker:0", "worker:1"):
        for b in builds:
            assert f"[{task}] LS {b} []" in out, (task, b, out)
        chain = re.findall(rf"^\[{task}\] CHAIN (.*)$", out, re.M)
        assert len(chain) == 1, out
        exes = chain[0].split()
        looms = [e for e in exes if e.endswith("/loom")]
        assert looms, exes  # the agent (and its guard, if any), above the task's shell
        assert all(e.startswith(str(standalone["dir"])) for e in looms), exes
        assert not [e for e in exes for b in builds if hidden._under(e, b)], (exes, builds)
    nothing_left(jd)


# ---- preflight -----------------------------------------------------------------

NORMAL_PASS = pytest.mark.skipif(
    SANITIZED, reason="one Spark driver per case: runs in the normal pass (the sanitized pass runs "
                      "the C paths through the other Spark tests)")


PREFLIGHT = ["slots", "dynamic", "gpus"]


def preflight_case(case):
    """The spec, master, conf and the message's two parts of a preflight
    case."""
    spec = {"name": "pre", "roles": {"worker": {"instances": 2, "command": "true"}}}
    master = "local-cluster[2,1,1024]"
    conf = {}
    if case == "slots":
        # the application says how many executors it has: the preflight
        # need not wait for a third
        conf = {"spark.executor.instances": "2"}
        spec["roles"]["worker"]["instances"] = 3
        want = ("the job has 3 tasks, all started together in one barrier stage, but Spark "
                "application app-")
        want2 = "has 2 task slots (2 executors with 1 cores, spark.task.cpus 1)"
    elif case == "dynamic":
        conf = {"spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.shuffleTracking.enabled": "true"}
        want, want2 = "has dynamic allocation on (spark.dynamicAllocation.enabled=true)", ""
    else:
        master = "local-cluster[1,2,1024]"  # 2 tasks per executor
        spec["roles"]["worker"]["gpus"] = 1
        want = "role 'worker' asks for 1 GPUs per task"
        want2 = "runs 2 tasks per executor: tasks with GPUs need one task per executor"
    return spec, master, conf, want, want2


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """The three preflight cases run by one driver process, one after
    another (each its own Spark application, with its own LOOM_HOME): the
    driver's start is paid once. {case: (its Loom, its RESULT)}."""
    from conftest import Loom
    base = tmp_path_factory.mktemp("preflight")
    looms, runs = {}, []
    for case in PREFLIGHT:
        (base / case / "home").mkdir(parents=True)
        looms[case] = Loom(base / case / "home", base / case)
        spec, master, conf, _, _ = preflight_case(case)
        runs.append({"master": master, "conf": conf, "spec": spec,
                     "home": str(looms[case].home)})
    d = Driver(Loom(base, base), {"runs": runs})
    try:
        yield {case: (looms[case], d.next_result()) for case in PREFLIGHT}
    finally:
        d.stop()


@NORMAL_PASS
@pytest.mark.parametrize("case", PREFLIGHT)
def test_preflight_refuses_what_spark_cannot_give(preflight, case):
    _, _, _, want, want2 = preflight_case(case)
    loom, r = preflight[case]
    assert r.get("error") == "SpecError" and r["exit_code"] == 2, r
    assert want in r["message"] and want2 in r["message"], r["message"]
    # nothing started: no job directory, no Spark job
    assert not (loom.home / "jobs").exists() or not list((loom.home / "jobs").iterdir())
    assert r["spark_jobs"] == [], r["spark_jobs"]


# ---- restarts and retries inside the stage -------------------------------------

def test_task_restart_and_job_retry_run_in_the_same_stage(loom):
    """restart: task, retries 1, and max_restarts 1 from the application's
    spark.task.maxFailures=2 (the spec leaves it unset). worker:1 fails its
    first start and is restarted; worker:0 fails its first start and its
    restart, which fails the job's attempt; the whole job is retried and
    succeeds. The same two Spark tasks run every one of those agents: one
    stage, no relaunch by Spark. In the last attempt worker:0 ends 2.5 s
    before worker:1: its Spark task's next agent waits, parked, for the
    end, and no agent is refused (nothing polls)."""
    cmd = ("echo RUN $LOOM_TASK attempt=$LOOM_ATTEMPT; "
           "if [ $LOOM_TASK = worker:1 ] && [ $LOOM_ATTEMPT = 0 ]; then exit 7; fi; "
           "if [ $LOOM_TASK = worker:0 ] && [ $LOOM_ATTEMPT -lt 2 ]; then sleep 0.5; exit 9; fi; "
           "if [ $LOOM_TASK = worker:1 ]; then sleep 3; else sleep 0.5; fi")
    spec = {"name": "again", "retries": 1, "restart": "task",
            "retry_on": [7, 9], "roles": {"worker": {"instances": 2, "command": cmd}}}
    r = Driver(loom, {"master": "local-cluster[2,1,1024]", "spec": spec,
                      "conf": {"spark.task.maxFailures": "2"}}).result()
    assert r.get("exit_code") == 0, r
    assert ("loom: max_restarts 1 from spark.task.maxFailures=2 (the spec sets only retries): "
            "a task may fail 2 times, as Spark allows") in r["stderr"], r["stderr"]
    runs = sorted(set(re.findall(r"\[(worker:\d)\] RUN \S+ attempt=(\d)", r["stdout"])))
    assert runs == [("worker:0", "0"), ("worker:0", "1"), ("worker:0", "2"),
                    ("worker:1", "0"), ("worker:1", "1"), ("worker:1", "2")], runs
    jd = job_dir(loom)
    ev = events(jd)
    assert {e.get("task") for e in ev if e["event"] == "restarting"} == {"worker:0", "worker:1"}
    assert [e["event"] for e in ev if e["event"] == "retrying"] == ["retrying"]
    assert not [e for e in ev if e["event"] == "agent_refused"], ev
    last = max(i for i, e in enumerate(ev) if e["event"] == "retrying")
    assert any(e["event"] == "agent_parked" and e.get("task") == "worker:0"
               for e in ev[last:]), [e["event"] for e in ev[last:]]
    st = state(jd)
    assert st["state"] == "succeeded" and st["attempt"] == 1, st
    written = json.loads((jd / "spec.yaml").read_text())  # what the job ran with
    assert (written["max_restarts"], written["retries"]) == (1, 1), written
    by = {t["task"]: t for t in r["spark_tasks"]}
    assert by["worker:0"]["runs"] == 3 and by["worker:1"]["runs"] == 3, by
    stages = [s for s in r["spark_stages"] if s["tasks"] == 2]
    assert len(stages) == 1 and stages[0]["attempt"] == 0, r["spark_stages"]
    nothing_left(jd)


# ---- Spark relaunches the stage ------------------------------------------------

def test_an_executor_lost_relaunches_the_stage_as_the_next_attempt(loom, standalone):
    """The executor running worker:1 is killed mid-job. Spark aborts the
    barrier stage and relaunches it whole once the Worker has a new
    executor; the relaunched stage's agents take loom's attempt 1 (retries:
    1) with a higher fence, and the job succeeds. An agent that comes with
    the first stage attempt's fence afterwards is refused for good (its
    exit status 5), as an agent of a stale Spark stage attempt."""
    cmd = ("echo RUN $LOOM_TASK attempt=$LOOM_ATTEMPT; "
           "if [ $LOOM_ATTEMPT = 0 ]; then sleep 300; fi; sleep 4; echo DONE $LOOM_TASK")
    spec = {"name": "lost", "retries": 1, "roles": {"worker": {"instances": 2, "command": cmd}}}
    d = Driver(loom, {"master": standalone["master"], "spec": spec})
    jd = job_dir(loom)
    st = wait_for(lambda: (s := state(jd))["state"] == "running" and s, "the job running", 120)
    agent = {t["task"]: t["agent_pid"] for t in st["tasks"]}["worker:1"]
    execs = [p for p, c in ancestors(agent) if "CoarseGrainedExecutorBackend" in c]
    assert execs, ancestors(agent)
    os.kill(execs[0], signal.SIGKILL)
    # the next attempt runs in the relaunched stage
    wait_for(lambda: state(jd)["attempt"] == 1 and state(jd)["state"] == "running",
             "attempt 1 running", 180)
    # an agent of the first stage attempt (fence 0: below any since) is refused
    secret = (jd / "secret").read_text().strip()
    addr = json.loads((jd / "coord.json").read_text())["addr"]
    env = dict(os.environ, LOOM_COORD=addr, LOOM_SECRET=secret, LOOM_TASK="worker:0",
               LOOM_ATTEMPT="any", LOOM_FENCE="0")
    stale = subprocess.run([str(LOOM), "agent"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert stale.returncode == 5, stale.stderr
    assert "a stale Spark stage attempt" in stale.stderr, stale.stderr
    r = d.result()
    assert r.get("exit_code") == 0 and r["state"] == "succeeded", r
    st = state(jd)
    assert st["attempt"] == 1, st
    assert re.findall(r"\[(worker:\d)\] DONE", r["stdout"]) != [], r["stdout"]
    ev = events(jd)
    # worker:1 was lost with its executor, which made the first stage
    # attempt stale; the relaunched stage raised the fence. The agent says
    # why when a signal reaches it first (pyspark's daemon hangs up its
    # process group, or the worker's death signal); when it is killed
    # before it can (seen under ASan, where stopping is slower), the
    # coordinator sees its connection close
    lost = [e for e in ev if e["event"] == "lost" and e.get("task") == "worker:1"]
    assert lost and any(why in lost[0].get("reason", "") for why in (
        "Spark: the executor was lost", "its connection to the coordinator closed")), ev
    assert [e["event"] for e in ev].count("launch_stale") >= 1
    assert any(e["event"] == "fence_raised" for e in ev), [e["event"] for e in ev]
    # (the stale agent's refusal, among others: Spark may start one more
    # agent as the job ends, which is refused for that)
    refused = [e for e in ev if e["event"] == "agent_refused" and e.get("final")]
    assert any("stale Spark stage attempt" in e["reason"] for e in refused), refused
    # Spark ran the stage twice: attempt 0 failed, attempt 1 complete
    stages = sorted((s["attempt"], s["status"]) for s in r["spark_stages"] if s["tasks"] == 2)
    assert stages[0] == (0, "FAILED") and stages[-1][1] == "COMPLETE", r["spark_stages"]
    nothing_left(jd)


# ---- stopping from the driver --------------------------------------------------

STOPPING = ["loom kill", "timeout", "exception"]
STOP_AFTER = 15  # the timeout case's, in seconds


@pytest.fixture(scope="module")
def stopping(tmp_path_factory):
    """The three ways to stop a job from the driver, one after another in
    one driver process and Spark application (local-cluster[2,1,1024],
    each job with its own LOOM_HOME): `loom kill` from another shell once
    the job runs; a timeout; an exception in the driver (KeyboardInterrupt)
    once the job runs. Each job is seen running first, and what is checked
    at once is checked as its RESULT comes: {how: (its Loom, job
    directory, RESULT, its state then, what nothing_left raised or None)}."""
    from conftest import Loom
    base = tmp_path_factory.mktemp("stopping")
    looms, runs = {}, []
    for how in STOPPING:
        d = base / how.replace(" ", "-")
        (d / "home").mkdir(parents=True)
        looms[how] = Loom(d / "home", d)
        spec = {"name": "stop", "roles": {"worker": {
            "instances": 2, "command": "echo UP $LOOM_TASK; sleep 300"}}}
        cfg = {"master": "local-cluster[2,1,1024]", "spec": spec, "home": str(looms[how].home)}
        if how == "timeout":
            cfg["timeout"] = STOP_AFTER
        elif how == "exception":
            cfg["raise_when_running"] = True
        runs.append(cfg)
    drv = Driver(Loom(base, base), {"runs": runs})
    got = {}
    try:
        for how in STOPPING:
            loom = looms[how]
            jd = job_dir(loom)
            if how == "exception":
                # the driver interrupts itself as soon as the job runs, which
                # may be gone from state.json before a look here: every task
                # started before the interrupt, in the event log
                def ran():
                    ev = [e["event"] for e in events(jd)]
                    cut = ev.index("interrupted") if "interrupted" in ev else len(ev)
                    return state(jd)["state"] == "running" or ev[:cut].count("started") == 2
                wait_for(ran, "the job running", 120)
            else:
                wait_for(lambda: state(jd)["state"] == "running", "the job running", 120)
            if how == "loom kill":
                k = loom.run("kill", jd.name)
                assert k.returncode == 0, k.stderr
            r = drv.next_result()
            try:
                nothing_left(jd)
                left = None
            except AssertionError as e:
                left = e
            got[how] = (loom, jd, r, state(jd), left)
        yield got
    finally:
        drv.stop()


@NORMAL_PASS
@pytest.mark.parametrize("how", STOPPING)
def test_stopping_from_the_driver_leaves_nothing(stopping, how):
    """A timeout, an exception in the driver (KeyboardInterrupt) or `loom
    kill` from another shell stop the job: run() returns or raises, the
    Spark job ends, and no agent or task process is left."""
    loom, jd, r, st, left = stopping[how]
    if how == "timeout":
        assert r.get("error") == "JobTimeout", r
        assert f"was still running after {STOP_AFTER} s and was stopped" in r["message"], \
            r["message"]
    elif how == "exception":
        assert r.get("error") == "KeyboardInterrupt", r
    else:
        assert r.get("exit_code") == 130 and r["state"] == "killed", r
    assert st["state"] in ("killed", "failed"), st
    if left:
        raise left
    # the Spark job of the stage is over, not left running (nor any of the
    # application's earlier runs)
    assert r["spark_jobs"] and all(j["status"] != "RUNNING" for j in r["spark_jobs"]), \
        r["spark_jobs"]
    assert not loom_pids_of(loom.home), "processes outlived the job"


# ---- DataFrames in and out -----------------------------------------------------

FEEDTASK = Path(__file__).parent / "spark" / "feedtask.py"


def feed_spec(loom, name, mode, instances=2, library=None):
    """The spec of feedtask.py's tasks. library: the libloom.so they load
    (LOOM_LIBRARY), for Workers that see no build directory (the
    standalone fixture's "library"); else the build's, beside LOOM_BIN."""
    env = {"PYTHONPATH": str(ROOT / "python")}
    env.update({"LOOM_LIBRARY": str(library)} if library else {"LOOM_BIN": str(LOOM)})
    return {"name": name, "env": env,
            "roles": {"worker": {"instances": instances,
                                 "command": f"{SPARK_PYTHON} {FEEDTASK} {mode}"}}}


@NORMAL_PASS
def test_train_feeds_a_dataframe_to_the_tasks_every_epoch(loom):
    """12,000 Fashion-MNIST rows in 4 partitions, 2 epochs, 2 workers: the
    DataFrame is spilled once (4 files of 785-byte records, one a
    partition) and read by the tasks through the feed, each epoch whole:
    the rows and the sum of every byte the tasks read, per epoch, are the
    DataFrame's."""
    r = Driver(loom, {"master": "local-cluster[2,1,1024]", "mode": "train", "rows": 12000,
                      "partitions": 4, "epochs": 2,
                      "spec": feed_spec(loom, "dftrain", "count")}).result()
    assert r.get("exit_code") == 0, r
    sp = r["spill"]
    assert sp["rows"] == 12000 and sp["record_bytes"] == 785 and len(sp["files"]) == 4, sp
    assert sp["streamed"] is False, sp  # 2 tasks on 2 slots: no slot to stream on
    assert sp["columns"] == ["image:binary", "label:tinyint"], sp
    got = per_epoch(r["stdout"])
    want = [r["data"]["rows"], r["data"]["sum"]]
    assert got == {0: want, 1: want}, (got, want)
    # the spill is gone
    assert not any(Path(f).exists() for f in sp["files"])
    nothing_left(job_dir(loom))


@NORMAL_PASS
def test_train_streams_the_dataframe_beside_the_job(loom):
    """With task slots beyond the job's (local-cluster[2,2,1024]: 4 slots,
    2 tasks), train streams: the job starts at once, a Spark job on the
    other slots writes the 12 partitions (each slowed to 0.3 s) into the
    spill, and the tasks read each as soon as it is whole: the first
    records come before the spill ends. Epoch 2 replays the spill. One
    task is C (feedprobe: loom_feed_next_batch, no Python), one Python:
    together they read the DataFrame's rows and byte sum twice, exactly."""
    spec = feed_spec(loom, "dfstream", "count", instances=1)
    spec["roles"]["chief"] = {"command": f"{BUILD}/examples/feed-probe/feedprobe --batch 64 --sum"}
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "train", "rows": 12000,
                      "partitions": 12, "epochs": 2, "slow_partition_s": 0.3,
                      "spec": spec}).result()
    assert r.get("exit_code") == 0, r
    sp = r["spill"]
    assert sp["streamed"] is True and sp["rows"] == 12000 and sp["record_bytes"] == 785, sp
    assert len(sp["files"]) == 12, sp
    rows, total, recs, nbytes = mixed_totals(r["stdout"])
    assert (rows, total) == (2 * r["data"]["rows"], 2 * r["data"]["sum"]), r["stdout"][-2000:]
    assert nbytes == recs * 785 and recs > 0, (recs, nbytes)
    firsts = [float(t) for t in re.findall(r"FIRST task=\S+ t=([\d.]+)", r["stdout"])]
    assert len(firsts) == 1, r["stdout"][-2000:]
    # streamed: the tasks read while Spark was still writing
    assert min(firsts) < sp["spill_ended"] - 0.5, (firsts, sp)
    assert not any(Path(f).exists() for f in sp["files"])
    nothing_left(job_dir(loom))


@NORMAL_PASS
def test_streaming_waits_for_slow_tasks(loom):
    """Back-pressure: epochs=1, 10 partitions of 1,000 rows (785,000 bytes
    each), ahead=800,000 bytes, tasks that sleep 0.1 s a batch of 512: a
    partition is computed only while the spill holds at most 800,000
    bytes, and the feed removes each file once read. The spill directory
    never held more than ahead plus one partition for each of the 2 spare
    slots' writers (it would hold most of the 7.85 MB without), Spark's
    writers waited, and the tasks read every row once."""
    spill = loom.tmp / "spool"
    spec = feed_spec(loom, "dfpressure", "count")
    spec["env"]["FEEDTASK_DELAY"] = "0.1"
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "train", "rows": 10000,
                      "partitions": 10, "epochs": 1, "stream": True, "ahead": 800000,
                      "spill_dir": str(spill), "spec": spec}).result()
    assert r.get("exit_code") == 0, r
    sp = r["spill"]
    assert sp["streamed"] is True and sp["rows"] == 10000, sp
    assert per_epoch(r["stdout"]) == {0: [r["data"]["rows"], r["data"]["sum"]]}, \
        r["stdout"][-2000:]
    assert sp["waited_s"] > 0.2, sp
    assert 0 < r["spill_peak"] <= 800000 + 2 * 785000, r["spill_peak"]
    assert not list(spill.glob("part-*")), list(spill.iterdir())
    nothing_left(job_dir(loom))


@NORMAL_PASS
def test_a_failed_spill_stops_the_job_with_its_reason(loom):
    """Streaming, a partition whose images are 783 bytes (rows of 784
    where the first row had 785): Spark's writer fails, and train stops
    the job and raises Spark's error, which names the widths."""
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "train", "rows": 4000,
                      "partitions": 4, "epochs": 1, "stream": True, "bad_width_partition": 2,
                      "conf": {"spark.task.maxFailures": "1"},
                      "spec": feed_spec(loom, "dfbad", "count")}).result()
    assert r.get("error"), r
    assert "784 bytes where the first row had 785" in r["message"], r["message"][-2000:]
    jd = job_dir(loom)
    assert state(jd)["state"] in ("failed", "killed"), state(jd)
    nothing_left(jd)


@NORMAL_PASS
def test_the_spill_and_the_output_can_live_on_hdfs(loom, hdfs):
    """spill_dir an hdfs:// URL (executors that share no file system):
    train streams 6 partitions through HDFS (each put whole by the
    executors' `loom fs put`, the feed following the directory) and
    replays them for epoch 2; inference streams, consumes, and commits its
    output there exactly once. Both leave no spill file behind."""
    url = hdfs.url("/spark-spill")
    spec = feed_spec(loom, "dfhdfs", "count")
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "train", "rows": 6000,
                      "partitions": 6, "epochs": 2, "stream": True, "spill_dir": url,
                      "spec": spec}).result()
    assert r.get("exit_code") == 0, r
    sp = r["spill"]
    assert sp["streamed"] is True and len(sp["files"]) == 6, sp
    assert all(f.startswith(url + "/part-") for f in sp["files"]), sp
    got = per_epoch(r["stdout"])
    want = [r["data"]["rows"], r["data"]["sum"]]
    assert got == {0: want, 1: want}, (got, want)
    left = hdfs.java_text("-ls", url)
    assert "part-" not in left and "_DONE" not in left, left
    nothing_left(job_dir(loom))
    for p in (loom.home / "jobs").iterdir():  # the next driver's job is the only one
        import shutil
        shutil.rmtree(p)
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "inference", "rows": 5000,
                      "partitions": 4, "stream": True, "spill_dir": url,
                      "spec": feed_spec(loom, "dfhdfsinfer", "infer")}).result()
    assert r.get("exit_code") == 0, r
    assert len(r["lines"]) == 5000 and r["lines"] == r["data"]["lines"]
    left = hdfs.java_text("-ls", "-R", url)
    assert "part-" not in left and "_DONE" not in left, left
    nothing_left(job_dir(loom))


@NORMAL_PASS
def test_inference_returns_each_rows_result_exactly_once(loom):
    """10,000 rows streamed (4 slots, 2 tasks) through 2 tasks that write
    one line a record ("label,image byte sum"): the DataFrame inference
    returns has each input row's line exactly once. The default spill
    directory: once the driver has removed what docs/spark.md says is the
    caller's (the directory of res.inputFiles()), nothing of loom's is left
    in the driver's temporary directory (an empty loom-spill-* was)."""
    tmp = loom.tmp / "tmpdir"
    tmp.mkdir()
    r = Driver(loom, {"master": "local-cluster[2,2,1024]", "mode": "inference", "rows": 10000,
                      "partitions": 3, "stream": True,
                      "spec": feed_spec(loom, "dfinfer", "infer")},
               env_extra={"TMPDIR": str(tmp)}).result()
    assert r.get("exit_code") == 0, r
    assert len(r["lines"]) == 10000
    assert r["lines"] == r["data"]["lines"]
    assert not list(tmp.glob("loom-*")), list(tmp.iterdir())
    nothing_left(job_dir(loom))


@NORMAL_PASS
def test_a_function_runs_in_every_task_and_its_values_and_errors_come_back(loom):
    """loom.spark.run(spark, fn): a function defined in the driver's
    __main__ and closing over its locals (as in a notebook cell) runs in 2
    tasks, each under a Spark executor, and the Result's values hold each
    task's return value; the pickle goes to the executors as a file of the
    application (SparkContext.addFile), not through the job directory.
    In the same application a function that raises in worker:1 (retries
    0: not Spark's budget) raises TaskError in the driver naming worker:1,
    with its traceback."""
    base = {"master": "local-cluster[2,1,1024]", "mode": "fn", "num_workers": 2}
    d = Driver(loom, {"runs": [{**base, "scale": 10, "offset": 3},
                               {**base, "fail_task": "worker:1", "retries": 0}]})
    try:
        r = d.next_result()
        assert r.get("exit_code") == 0 and r["ok"], (r.get("message"), r.get("trace"))
        assert r["values"] == {f"worker:{i}": {"task": f"worker:{i}", "value": 10 * (i + 1) + 3,
                                               "in_executor": True} for i in (0, 1)}, r["values"]
        assert len(r["spark_tasks"]) == 2, r["spark_tasks"]
        spec = json.loads((loom.home / "jobs" / r["job"] / "spec.yaml").read_text())
        assert spec["roles"]["worker"]["command"][-1].startswith("loom-fn-"), spec
        assert not spec["files"], spec
        nothing_left(loom.home / "jobs" / r["job"])
        r = d.next_result()
        assert r.get("error") == "TaskError", r
        assert r["task"] == "worker:1" and "worker:1 raised ValueError: boom in worker:1" in \
            r["message"], r
        assert "ValueError: boom in worker:1" in r["remote_traceback"], r["remote_traceback"]
        assert "task_fn" in r["remote_traceback"], r["remote_traceback"]
        nothing_left(loom.home / "jobs" / r["job"])
        assert d.p.wait(120) == 0, d.log.read_text()[-3000:]
        # the driver's JVM (its stdout is the driver's) ends after it
        wait_for(lambda: not loom_pids_of(loom.home), "the driver's JVM to end", 60)
    finally:
        d.stop()


def test_train_and_inference_take_a_function_and_an_rdd(loom):
    """loom.spark.train(spark, rdd, fn) with an RDD of ([x, y, z], label)
    rows, as TensorFlowOnSpark programs feed them: the rows become 32-byte
    records (three doubles and a long), every task's function reads what
    the feed gives it (splits go to whoever asks), and the values say
    every row was read once with its numbers intact. loom.spark.inference(spark, rdd, fn) over an RDD
    of 2-byte records: the DataFrame returned has the line each record's
    function call wrote, each exactly once. Nothing of either job is left."""
    base = {"master": "local-cluster[2,1,1024]", "partitions": 4}
    d = Driver(loom, {"runs": [{**base, "mode": "train_fn", "rows": 300},
                               {**base, "mode": "inference_fn", "rows": 250}]})
    try:
        r = d.next_result()
        assert r.get("exit_code") == 0, (r.get("message"), r.get("trace"))
        vals = r["values"]
        assert sorted(vals) == ["worker:0", "worker:1"], vals
        assert sum(v["rows"] for v in vals.values()) == 300, vals
        assert abs(sum(v["sum"] for v in vals.values()) - r["expect"]) < 1e-6, (vals, r["expect"])
        nothing_left(loom.home / "jobs" / r["job"])
        r = d.next_result()
        assert r.get("exit_code") == 0, (r.get("message"), r.get("trace"))
        assert r["lines"] == r["expect"], (len(r["lines"]), r["lines"][:5], r["expect"][:5])
        assert d.p.wait(120) == 0, d.log.read_text()[-3000:]
        wait_for(lambda: not loom_pids_of(loom.home), "the driver's JVM to end", 60)
    finally:
        d.stop()


@NORMAL_PASS
def test_inference_is_exactly_once_with_an_executor_killed_mid_stage(loom, standalone):
    """As above on the standalone cluster, slowly (1 ms a record), with
    retries: 1: once some splits are committed, the executor running
    worker:1 is SIGKILLed. Spark relaunches the stage, the job's attempt 1
    reads the splits not yet committed, and the returned DataFrame still
    has each row's line exactly once."""
    spec = feed_spec(loom, "dfkill", "infer", library=standalone["library"])
    spec["retries"] = 1
    spec["env"]["FEEDTASK_DELAY"] = "0.001"
    d = Driver(loom, {"master": standalone["master"], "mode": "inference", "rows": 8000,
                      "partitions": 8, "spec": spec})
    jd = job_dir(loom)

    def committed():
        try:
            s = state(jd)
        except (OSError, ValueError):
            return None
        return s["state"] == "running" and (s.get("feed") or {}).get("committed", 0) >= 1 and s
    st = wait_for(committed, "a split committed", 180)
    agent = {t["task"]: t["agent_pid"] for t in st["tasks"]}["worker:1"]
    execs = [p for p, c in ancestors(agent) if "CoarseGrainedExecutorBackend" in c]
    assert execs, ancestors(agent)
    os.kill(execs[0], signal.SIGKILL)
    r = d.result()
    assert r.get("exit_code") == 0, r
    assert state(jd)["attempt"] == 1, state(jd)
    assert len(r["lines"]) == 8000
    assert r["lines"] == r["data"]["lines"]
    nothing_left(jd)


# ---- Spark on YARN ------------------------------------------------------------

def yarn_conf():
    jars = spark_home() / "jars"
    # the executors run on this machine: Spark's jars are where the driver's
    # are (no upload of the jars to HDFS for each application)
    return {"spark.yarn.jars": f"local:{jars}/*", "spark.executor.instances": "2",
            "spark.executor.cores": "2", "spark.executor.memory": "512m",
            "spark.yarn.am.memory": "512m",
            "spark.executorEnv.PYSPARK_PYTHON": str(SPARK_PYTHON)}


@NORMAL_PASS
def test_on_yarn_every_role_runs_in_yarn_containers_and_a_dataframe_streams(loom, yarn):
    """Spark on a real YARN (ResourceManager, 2 NodeManagers, HDFS):
    2 executors of 2 cores in YARN containers. A chief, a worker and a ps
    run as one barrier stage, each task inside a container of the
    application (CONTAINER_ID in its environment), the ps stopped once the
    others succeed. Then train streams 6 partitions through an HDFS spill
    (the free fourth slot writes them) for 2 epochs, every row read once an
    epoch. Both applications end FINISHED in YARN, and nothing of the jobs
    is left."""
    env = {"HADOOP_CONF_DIR": str(yarn.conf)}
    spec = {"name": "sparkyarn", "roles": {
        "chief": {"command": "echo CHIEF in $CONTAINER_ID; sleep 1"},
        "worker": {"command": "echo WORKER in $CONTAINER_ID; sleep 1"},
        "ps": {"command": "echo PS in $CONTAINER_ID; sleep 300"}}}
    r = Driver(loom, {"master": "yarn", "conf": yarn_conf(), "spec": spec},
               env_extra=env).result(timeout=400)
    assert r.get("exit_code") == 0, r
    app = r["app"]
    assert app.startswith("application_"), r
    where = dict(re.findall(r"\[(\w+:\d)\] (?:CHIEF|WORKER|PS) in (\S+)", r["stdout"]))
    assert set(where) == {"chief:0", "worker:0", "ps:0"}, r["stdout"][-2000:]
    for task, cid in where.items():
        assert cid.startswith("container_" + app.removeprefix("application_")), (task, cid)
    nothing_left(job_dir(loom))
    import shutil
    for p in (loom.home / "jobs").iterdir():
        shutil.rmtree(p)
    url = f"hdfs://127.0.0.1:{yarn.nn_port}/spark-yarn-spill"
    r = Driver(loom, {"master": "yarn", "conf": yarn_conf(), "mode": "train", "rows": 6000,
                      "partitions": 6, "epochs": 2, "stream": True, "spill_dir": url,
                      "spec": feed_spec(loom, "dfyarn", "count")},
               env_extra=env).result(timeout=400)
    assert r.get("exit_code") == 0, r
    assert r["spill"]["streamed"] is True, r["spill"]
    got = per_epoch(r["stdout"])
    want = [r["data"]["rows"], r["data"]["sum"]]
    assert got == {0: want, 1: want}, (got, want)
    nothing_left(job_dir(loom))
    apps = {a["id"]: a for a in yarn.apps()}
    assert app in apps and r["app"] in apps, apps.keys()
    for a in (app, r["app"]):
        wait_for(lambda: yarn.rest(f"apps/{a}")["app"]["state"] == "FINISHED",
                 f"YARN to have {a} FINISHED", 60)


# ---- Spark across hosts ---------------------------------------------------------

@pytest.fixture(scope="module")
def spark_hosts(tmp_path_factory):
    """A standalone Spark across three network namespaces (tests/system/
    netns.py): the Master on h0 (where the driver runs), a Worker of 2
    cores on each of h1 and h2, every daemon bound to its host's address."""
    import netns
    why = netns.available()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("sparkhosts")
    cls = str(spark_home() / "bin" / "spark-class")
    procs = []
    with netns.Hosts(3) as h:
        def env(i):
            return dict(spark_env(), SPARK_LOCAL_IP=h.addrs[i], SPARK_LOCAL_HOSTNAME=h.addrs[i])
        master = f"spark://{h.addrs[0]}:7077"
        try:
            procs.append(subprocess.Popen(
                h.exec_args(0, cls, "org.apache.spark.deploy.master.Master", "--host", h.addrs[0],
                            "--port", "7077", "--webui-port", "8080"),
                env=env(0), stdout=open(d / "master.log", "w"), stderr=subprocess.STDOUT,
                start_new_session=True))
            for i in (1, 2):
                (d / f"w{i}").mkdir()
                procs.append(subprocess.Popen(
                    h.exec_args(i, cls, "org.apache.spark.deploy.worker.Worker", "-c", "2", "-m",
                                "2g", "--host", h.addrs[i], "--webui-port", "8081", "--work-dir",
                                d / f"w{i}", master),
                    env=env(i), stdout=open(d / f"worker{i}.log", "w"),
                    stderr=subprocess.STDOUT, start_new_session=True))

            def alive_workers():
                # the Master's UI is on h0: ask from there
                r = subprocess.run(h.exec_args(
                    0, "/usr/bin/python3", "-c",
                    "import json, urllib.request as u; print(len([w for w in json.loads("
                    f"u.urlopen('http://{h.addrs[0]}:8080/json/', timeout=5).read())['workers']"
                    " if w['state'] == 'ALIVE']))"), capture_output=True, text=True)
                return r.returncode == 0 and r.stdout.strip() == "2"
            wait_for(alive_workers, "the Master on h0 to have the Workers of h1 and h2", 120)
            yield {"hosts": h, "master": master, "env": env}
        finally:
            stop_daemons(procs)


@NORMAL_PASS
def test_across_hosts_the_tasks_run_on_the_workers_hosts_and_a_dataframe_streams(loom,
                                                                                  spark_hosts):
    """The driver on h0, executors on h1 and h2 (network namespaces, real
    links; the coordinator in the driver is reached across them, with
    LOOM_TLS's default, auto: TLS on links that leave a host, which
    test_tls checks on the wire). A chief and a worker run on the
    Workers' hosts: each task's LOOM_HOST is its executor's address,
    LOOM_COORD the driver's, and the chief's TF_CONFIG names both hosts.
    Then a DataFrame streams to a C task and a Python task on those hosts
    (4 slots, 2 tasks), every row read once an epoch."""
    h = spark_hosts["hosts"]
    pre = h.exec_args(0)
    conf = {"spark.driver.host": h.addrs[0], "spark.executor.cores": "2",
            "spark.executor.memory": "768m"}
    spec = {"name": "sparkhosts", "roles": {
        "chief": {"command": "echo AT $LOOM_TASK host=$LOOM_HOST coord=$LOOM_COORD "
                             "tf=$TF_CONFIG"},
        "worker": {"command": "echo AT $LOOM_TASK host=$LOOM_HOST coord=$LOOM_COORD"}}}
    r = Driver(loom, {"master": spark_hosts["master"], "conf": conf, "spec": spec},
               env_extra=spark_hosts["env"](0), prefix=pre).result()
    assert r.get("exit_code") == 0, r
    at = {t: (host, coord) for t, host, coord in
          re.findall(r"AT (\S+) host=(\S+) coord=(\S+)", r["stdout"])}
    assert set(at) == {"chief:0", "worker:0"}, r["stdout"][-2000:]
    assert {host for host, _ in at.values()} <= {h.addrs[1], h.addrs[2]}, at
    assert all(coord.startswith(h.addrs[0] + ":") for _, coord in at.values()), at
    tf = json.loads(re.search(r"tf=(\{.*\})", r["stdout"]).group(1))
    named = {a.rsplit(":", 1)[0] for hostports in tf["cluster"].values() for a in hostports}
    assert named == {at["chief:0"][0], at["worker:0"][0]}, tf
    assert "does not speak TLS" not in r.get("stderr", ""), r["stderr"][-2000:]
    nothing_left(job_dir(loom))
    import shutil
    for p in (loom.home / "jobs").iterdir():
        shutil.rmtree(p)
    spec = feed_spec(loom, "dfhosts", "count", instances=1)
    spec["roles"]["chief"] = {"command": f"{BUILD}/examples/feed-probe/feedprobe --batch 64 --sum"}
    r = Driver(loom, {"master": spark_hosts["master"], "conf": conf, "mode": "train",
                      "rows": 6000, "partitions": 6, "epochs": 2, "stream": True, "spec": spec},
               env_extra=spark_hosts["env"](0), prefix=pre).result()
    assert r.get("exit_code") == 0, r
    assert r["spill"]["streamed"] is True, r["spill"]
    rows, total, _, _ = mixed_totals(r["stdout"])
    assert (rows, total) == (2 * r["data"]["rows"], 2 * r["data"]["sum"]), r["stdout"][-2000:]
    nothing_left(job_dir(loom))
