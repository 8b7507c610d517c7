"""The backend contract: the same specs and the same checks on every
backend (local, Slurm, YARN, Spark), one parameter each.

(1) a job of every role (chief, 2 workers of 2 procs, ps, evaluator): what
each task sees (ranks, TF_CONFIG, the torch variables, LOOM_*), checked
exactly; (2) a failing task fails the job with its root cause and exit
status 1; (3) `loom kill` (and Ctrl-C on `loom run`) stops a running job
with 130 and leaves nothing running; (4) restart: task restarts the failed
task alone, in a new attempt, while its peer runs on in its first.

A backend's own assertions (YARN's application and containers, Slurm's
steps, Spark's barrier stage) are in its Backend class's hooks here; what
only one backend does (Slurm's placement, YARN's refusals, Spark's stage
relaunch) stays in its own module. The clusters are conftest's, one per
test run: `yarn` (the Hadoop cluster), `slurm` (3 nodes of 4 CPUs); Spark
is one driver process for the module (local[5,4]: 5 task slots, 4
failures a task), which runs each case's job with loom.spark.run, as a
user's driver does. The tests are grouped by backend (a module-scoped
parameter), so each cluster or driver is up once."""
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import LOOM, ROOT, SAN_REPORT, loom_pids_of

# LOOM_CONTRACT_BACKENDS=local (scripts/test.sh --quick) runs the named ones alone
BACKENDS = [b for b in ["local", "slurm", "yarn", "spark"]
            if b in os.environ.get("LOOM_CONTRACT_BACKENDS", "local slurm yarn spark").split()]

SPARK_PYTHON = Path(os.environ.get("LOOM_SPARK_PYTHON", ROOT / ".venv-spark" / "bin" / "python"))

# One SparkSession for every Spark case: each line on stdin is a job
# ({"id": n, "spec": path, "home": LOOM_HOME, "timeout": s}), run with
# loom.spark.run; each answer a line RESULT <json> with the request's id.
SPARK_SERVER = r"""
import json, os, sys
from pyspark.sql import SparkSession
import loom.spark
spark = (SparkSession.builder.master(sys.argv[1]).appName("loom-contract")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
print("READY", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    try:
        r = loom.spark.run(spark, req["spec"], home=req["home"], echo=False,
                           timeout=req.get("timeout"))
        out = {"exit_code": r.exit_code, "state": r.state, "stdout": r.stdout,
               "stderr": r.stderr, "spark_tasks": r.spark_tasks}
    except BaseException as e:
        out = {"error": type(e).__name__, "message": str(e),
               "exit_code": getattr(e, "exit_code", None)}
    out["id"] = req["id"]
    # the Spark jobs still running once run() returned: none, whatever the end
    out["active_jobs"] = list(spark.sparkContext.statusTracker().getActiveJobsIds())
    print("RESULT " + json.dumps(out), flush=True)
# no spark.stop() (seconds of shutting down): the JVM ends when its stdin,
# this process's pipe to it, closes
os._exit(0)
"""


class Outcome:
    def __init__(self, rc, stdout, stderr):
        self.returncode, self.stdout, self.stderr = rc, stdout, stderr


def marked(marker):
    """Pids of live processes whose command line holds marker (a task's
    `sh -c '...; : MARKER'`)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    if (p / "stat").read_text().split(")")[-1].split()[0] != "Z":
                        out.append(int(p.name))
            except OSError:
                pass
    return out


def agents_of(pids):
    """The loom agents (`loom agent`) among the ancestors of pids."""
    out = set()
    for pid in pids:
        while pid > 1:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if cmd[1:2] == [b"agent"] and cmd[0].endswith(b"loom"):
                    out.add(pid)
                    break
                pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
            except (OSError, IndexError, ValueError):
                break
    return out


class Backend:
    """`loom run --backend NAME`, as a user runs a job from a shell."""

    name = "local"
    files_stay = True  # a job's files: are still in the task directory after it

    def __init__(self, loom):
        self.loom = loom

    def run(self, spec, timeout=120):
        return self.loom.run("run", "--backend", self.name, spec, timeout=timeout)

    def start(self, spec):
        return self.loom.popen("run", "--backend", self.name, spec)

    def stop(self, handle, how):
        """Stops the running job (`loom kill`, or SIGINT to `loom run` as
        Ctrl-C sends it); the Outcome of the run."""
        if how == "loom kill":
            k = self.loom.run("kill", self.loom.job_dir().name, timeout=30)
            assert k.returncode == 0, k.stderr
        else:
            os.killpg(handle.pid, signal.SIGINT)
        try:
            out, err = handle.communicate(timeout=30)
        finally:
            if handle.poll() is None:
                os.killpg(handle.pid, signal.SIGKILL)
        return Outcome(handle.returncode, out, err)

    # hooks for a backend's own checks, after each case
    def cleanup(self, handle):
        """After a case that started a job: whatever happened, it is stopped."""
        if handle.poll() is None:
            os.killpg(handle.pid, signal.SIGKILL)

    def after_env(self, name, env):
        pass

    def after_failure(self, name):
        pass

    def after_kill(self, name):
        pass

    def after_restart(self, ev):
        pass

    def teardown(self):
        pass


class Local(Backend):
    name = "local"


class Slurm(Backend):
    name = "slurm"
    files_stay = False

    def __init__(self, loom, cluster):
        super().__init__(loom)
        self.cluster = cluster
        loom.env.update(SLURM_CONF=str(cluster.conf))
        self.before = set(self.queue())

    def queue(self):
        """Every job ("ID STATE NAME") and step ("step ID NAME") in Slurm's queue."""
        def q(*args):
            return subprocess.run(["squeue", "-h", *args], env=self.cluster.env,
                                  capture_output=True, text=True, check=True).stdout.splitlines()
        return q("-o", "%i %T %j") + ["step " + l for l in q("-s", "-o", "%i %j")]

    def after_restart(self, ev):
        # the restarted task alone got a new srun (a new job step)
        assert sorted(e["task"] for e in ev if e["event"] == "launched") == [
            "worker:0", "worker:1", "worker:1"], ev

    def teardown(self):
        # No job or step of this test is left in Slurm: they end on their
        # own (a completing job leaves the queue within seconds), before
        # anything here cancels them.
        left = []

        def gone():
            left[:] = [l for l in self.queue() if l not in self.before]
            return not left
        try:
            self.loom.wait_for(gone, timeout=20, what="the test's Slurm jobs and steps to end")
        except AssertionError:
            pass
        subprocess.run(["scancel", "--user=root"], env=self.cluster.env, capture_output=True)
        self.loom.wait_for(lambda: not self.queue(), timeout=20, what="Slurm queue empty")
        assert not left, f"Slurm jobs/steps outlived the test: {left}"


class Yarn(Backend):
    name = "yarn"

    def __init__(self, loom, yarn):
        super().__init__(loom)
        self.yarn = yarn
        loom.env["HADOOP_CONF_DIR"] = str(yarn.conf)

    def app(self, name, states=("FINISHED", "FAILED", "KILLED"), timeout=30):
        """The one application of this name once the RM reports it in one of
        states (the RM's reports move to the final state a moment after the
        AM is told it is unregistered: CI saw RUNNING/UNDEFINED before)."""
        apps = [a for a in self.yarn.apps() if a["name"] == name]
        assert len(apps) == 1, apps
        return self.loom.wait_for(lambda: next((a for a in self.yarn.apps() if a["name"] == name
                                                and a["state"] in states), None),
                                  timeout=timeout, what=f"application {name} to be {states}")

    def after_env(self, name, env):
        # YARN's own variables: one container a task, all of this application
        app = self.app(name)
        assert (app["state"], app["finalStatus"], app["applicationType"]) == \
            ("FINISHED", "SUCCEEDED", "LOOM")
        assert app["unmanagedApplication"] is True
        chief, ps, ev, w = env["chief"], env["ps"], env["evaluator"], env["worker"]
        cids = {t: e["CONTAINER_ID"] for t, e in
                {"chief": chief, "ps": ps, "ev": ev, "w0": w[(0, 0)], "w1": w[(1, 0)]}.items()}
        assert len(set(cids.values())) == 5, cids
        assert w[(0, 1)]["CONTAINER_ID"] == cids["w0"]  # procs share their task's container
        serial = app["id"].split("_", 1)[1]
        assert all(c.startswith(f"container_{serial}_01_") for c in cids.values()), \
            (app["id"], cids)
        assert {e["NM_PORT"] for e in (chief, ps, ev, w[(0, 0)], w[(1, 0)])} <= \
            {str(p) for p in self.yarn.nm_ports}

    def after_failure(self, name):
        app = self.app(name)
        assert (app["state"], app["finalStatus"]) == ("FINISHED", "FAILED"), app
        assert "exited with code 3" in app["diagnostics"], app

    def after_kill(self, name):
        app = self.app(name, timeout=20)
        assert app["finalStatus"] == "KILLED", app

    def teardown(self):
        # nothing of the test is left running in YARN, and no sanitizer
        # report in what agents and coordinators in containers wrote
        # (the RM's reports move to the final state a moment after the AM
        # unregistered)
        live = []

        def none_live():
            live[:] = [a for a in self.yarn.apps() if a["state"] in
                       ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")]
            return not live
        try:
            self.loom.wait_for(none_live, timeout=15, what="no live YARN application")
        except AssertionError:
            pass
        assert not live, live
        for f in self.yarn.dir.glob("nm*/logs/application_*/container_*/std*"):
            text = f.read_text(errors="replace")
            m = SAN_REPORT.search(text)
            assert not m, f"{f}:\n{text[m.start():][:3000]}"


class SparkDriver:
    """The module's one Spark driver (SPARK_SERVER)."""

    def __init__(self, tmp):
        self.log = tmp / "spark-driver.log"
        script = tmp / "contract_driver.py"
        script.write_text(SPARK_SERVER)
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
        home = subprocess.run([str(SPARK_PYTHON), "-c", "import pyspark, os; "
                               "print(os.path.dirname(pyspark.__file__))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        env.update(SPARK_HOME=home, PYSPARK_PYTHON=str(SPARK_PYTHON),
                   PYSPARK_DRIVER_PYTHON=str(SPARK_PYTHON), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOCAL_HOSTNAME="localhost", LOOM_BIN=str(LOOM), NO_COLOR="1",
                   PYTHONPATH=str(ROOT / "python"))
        self.p = subprocess.Popen([str(SPARK_PYTHON), str(script), "local[5,4]"], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(self.log, "w"), text=True, start_new_session=True)
        self.sent, self.pending = 0, False
        first = self.p.stdout.readline()
        assert first.strip() == "READY", f"{first}\n{self.log.read_text()[-3000:]}"

    def submit(self, spec, home, timeout=None):
        self.sent += 1
        self.pending = True
        self.p.stdin.write(json.dumps({"id": self.sent, "spec": str(spec), "home": str(home),
                                       "timeout": timeout}) + "\n")
        self.p.stdin.flush()

    def result(self):
        """The answer to the last job submitted (an earlier one's, left by
        a test that failed before reading it, is passed over)."""
        while True:
            line = self.p.stdout.readline()
            assert line.startswith("RESULT "), f"{line}\n{self.log.read_text()[-3000:]}"
            r = json.loads(line[7:])
            if r["id"] == self.sent:
                self.pending = False
                return r

    def group(self):
        """Live processes of the driver's session: it, its JVM, Python workers."""
        out = []
        for p in Path("/proc").iterdir():
            try:
                st = (p / "stat").read_text().split(")")[-1].split()
            except OSError:
                continue
            if p.name.isdigit() and int(st[3]) == self.p.pid and st[0] != "Z":
                out.append(int(p.name))
        return out

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(30)
            end = time.monotonic() + 20
            while self.group() and time.monotonic() < end:
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            pass
        left = self.group()
        if left:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        assert not left, f"the Spark driver's processes outlived it: {left}"


class Spark(Backend):
    """loom.spark.run(spark, spec) in the module's driver: each role a
    barrier stage's Spark tasks, the coordinator a child of the driver."""

    name = "spark"

    def __init__(self, loom, driver):
        super().__init__(loom)
        self.driver = driver

    def outcome(self, r):
        assert "error" not in r, r
        assert r["active_jobs"] == [], r  # the job's barrier stage is over
        return Outcome(r["exit_code"], r["stdout"], r["stderr"])

    def run(self, spec, timeout=120):
        self.driver.submit(spec, self.loom.home, timeout)
        return self.outcome(self.driver.result())

    def start(self, spec):
        self.driver.submit(spec, self.loom.home)
        return self.driver

    def stop(self, handle, how):
        assert how == "loom kill"
        k = self.loom.run("kill", self.loom.job_dir().name, timeout=30)
        assert k.returncode == 0, k.stderr
        r = handle.result()
        assert r["state"] == "killed", r
        return self.outcome(r)

    def cleanup(self, handle):
        if handle.pending:  # the case failed before the job was stopped
            for jd in self.loom.jobs():
                self.loom.run("kill", jd.name, timeout=30)
            handle.result()


@pytest.fixture(scope="module")
def backend_name(request):
    return request.param


def only(*names):
    """A test of the backends named (by default every one)."""
    def mark(f):
        f.backends = names
        return f
    return mark


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        names = getattr(metafunc.function, "backends", BACKENDS)
        metafunc.parametrize("backend_name", [b for b in BACKENDS if b in names], indirect=True,
                             scope="module")


@pytest.fixture(scope="module")
def spark_driver(tmp_path_factory):
    if not SPARK_PYTHON.exists():
        pytest.skip(f"no Spark environment at {SPARK_PYTHON}: run scripts/setup-spark.sh")
    d = SparkDriver(tmp_path_factory.mktemp("spark-contract"))
    yield d
    d.close()


@pytest.fixture
def backend(request, backend_name, loom):
    if backend_name == "local":
        b = Local(loom)
    elif backend_name == "slurm":
        b = Slurm(loom, request.getfixturevalue("slurm"))
    elif backend_name == "yarn":
        b = Yarn(loom, request.getfixturevalue("yarn"))
    else:
        b = Spark(loom, request.getfixturevalue("spark_driver"))
    yield b
    b.teardown()


def nothing_left(loom, marker):
    """No process of the test's jobs is left: none that names its LOOM_HOME
    (coordinators, agents, tasks: their LOOM_JOB_DIR) and no task shell
    (the marker in its command line), wherever the backend started it."""
    loom.wait_for(lambda: not loom_pids_of(loom.home) and not marked(marker), timeout=20,
                  what="every process of the job to end")


# ---- (1) the environment of every role ---------------------------------------

def test_roles_environment_and_tf_config(backend, loom, tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("payload\n")
    spec = loom.spec(f"""
name: contractenv
env: {{JOBVAR: job-level, CUDA_VISIBLE_DEVICES: "0,1"}}
files: {{input/data.txt: {data}}}
roles:
  chief: {{command: 'env > env.txt; cat input/data.txt; for i in $(seq 100); do [ -s ../ps-0/env.txt ] && break; sleep 0.1; done'}}
  worker:
    instances: 2
    procs: 2
    env: {{ROLEVAR: from-role}}
    command: [sh, -c, 'env > env-$LOCAL_RANK.txt']
  ps: {{command: 'env > env.txt; exec sleep 60'}}
  evaluator: {{command: 'env > env.txt'}}
""")
    r = backend.run(spec)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[chief:0] payload" in r.stdout
    jd = loom.job_dir()

    def env_of(task, f="env.txt"):
        lines = (jd / "tasks" / task / f).read_text().splitlines()
        return dict(l.split("=", 1) for l in lines if "=" in l)

    chief = env_of("chief-0")
    w = {(i, p): env_of(f"worker-{i}", f"env-{p}.txt") for i in range(2) for p in range(2)}
    ps, ev = env_of("ps-0"), env_of("evaluator-0")
    # Ranks: chief first, then workers, procs each.
    assert chief["RANK"] == "0" and chief["LOOM_RANK"] == "0"
    assert [w[(i, p)]["RANK"] for i in range(2) for p in range(2)] == ["1", "2", "3", "4"]
    assert {e["WORLD_SIZE"] for e in [chief, *w.values()]} == {"5"}
    assert w[(1, 1)]["LOCAL_RANK"] == "1" and w[(1, 1)]["LOCAL_WORLD_SIZE"] == "2"
    assert w[(0, 0)]["LOOM_TASK"] == "worker:0" and w[(0, 0)]["LOOM_ROLE"] == "worker"
    assert w[(1, 0)]["LOOM_INDEX"] == "1" and w[(1, 0)]["LOOM_ATTEMPT"] == "0"
    assert w[(0, 0)]["JOBVAR"] == "job-level" and w[(0, 0)]["ROLEVAR"] == "from-role"
    assert "ROLEVAR" not in chief
    # No role asks for GPUs (gpus: 0): none is visible, whatever the
    # environment said (here the spec's env; a GPU node's or a Slurm
    # allocation's elsewhere): CUDA_VISIBLE_DEVICES set and empty
    for e in [chief, *w.values(), ps, ev]:
        assert e.get("CUDA_VISIBLE_DEVICES") == "", e.get("CUDA_VISIBLE_DEVICES")
    # Non-training roles get no torch rank.
    assert "RANK" not in ps and "LOOM_RANK" not in ps
    # MASTER_ADDR/PORT: rank 0's reserved port, the same for everyone.
    cluster = json.loads(chief["LOOM_CLUSTER"])
    assert set(cluster) == {"chief", "worker", "ps", "evaluator"}
    assert len(cluster["worker"]) == 2
    assert f'{chief["MASTER_ADDR"]}:{chief["MASTER_PORT"]}' == cluster["chief"][0]
    assert w[(1, 1)]["MASTER_PORT"] == chief["MASTER_PORT"]
    assert w[(1, 1)]["MASTER_ADDR"] == chief["MASTER_ADDR"]
    ports = [hp.rsplit(":", 1)[1] for hps in cluster.values() for hp in hps]
    assert len(set(ports)) == len(ports) == 5
    # TF_CONFIG exactly as TensorFlow parses it; evaluator outside the cluster.
    tf = json.loads(w[(1, 0)]["TF_CONFIG"])
    assert tf == {"cluster": {"chief": cluster["chief"], "worker": cluster["worker"],
                              "ps": cluster["ps"]},
                  "task": {"type": "worker", "index": 1}}
    tfe = json.loads(ev["TF_CONFIG"])
    assert "evaluator" not in tfe["cluster"] and tfe["task"] == {"type": "evaluator", "index": 0}
    # Secrets and coordinator address for libloom.
    assert len(chief["LOOM_SECRET"]) == 64 and chief["LOOM_COORD"].startswith("127.0.0.1:")
    assert chief["LOOM_JOB_DIR"] == str(jd) and chief["LOOM_JOB_ID"] == jd.name
    # files: placed in the working dir (the chief printed it, above); on
    # Slurm a node-local copy (sbcast) that is removed with the job
    # (test_slurm's test_heterogeneous_job_places_roles checks that)
    if backend.files_stay:
        assert (jd / "tasks/chief-0/input/data.txt").read_text() == "payload\n"
    # state.json: ps stopped as a service, everything else succeeded.
    st = loom.state()
    assert st["state"] == "succeeded" and st["exit_status"] == 0
    assert st["backend"] == backend.name
    states = {t["task"]: t["state"] for t in st["tasks"]}
    assert states == {"chief:0": "succeeded", "worker:0": "succeeded", "worker:1": "succeeded",
                      "ps:0": "stopped", "evaluator:0": "succeeded"}
    backend.after_env("contractenv", {"chief": chief, "worker": w, "ps": ps, "evaluator": ev})


# ---- (2) a failing task fails the job with its root cause -------------------

def test_a_failing_task_fails_the_job_with_its_root_cause(backend, loom):
    marker = f"contract-{uuid.uuid4().hex[:8]}"
    # retries: 0 said, not left to the backend (Spark's default is
    # spark.task.maxFailures - 1)
    spec = loom.spec(f"""
name: contractfail
retries: 0
roles:
  worker: {{instances: 2, command: 'if [ $LOOM_INDEX = 1 ]; then echo dying >&2; exit 3; fi; sleep 30; : {marker}'}}
""")
    t0 = time.monotonic()
    r = backend.run(spec)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "root cause: worker:1 (attempt 0) exited with code 3" in r.stderr, r.stderr
    assert "| dying" in r.stderr, r.stderr  # the tail of its stderr
    # its peer was stopped, not waited for
    assert time.monotonic() - t0 < 20
    st = loom.state()
    assert (st["state"], st["exit_status"]) == ("failed", 1), st
    fails = [e for e in loom.events() if e["event"] == "failed"]
    assert [(e["task"], e["attempt"], e["exit_code"]) for e in fails] == [("worker:1", 0, 3)]
    # a task's own failure is never mistaken for a refused launch
    assert not [e for e in loom.events() if e["event"] == "launch_retry"]
    nothing_left(loom, marker)
    backend.after_failure("contractfail")


# ---- (3) stopping a running job leaves nothing ------------------------------

def kill_case(backend, loom, how):
    name = "contractstop" + how.replace(" ", "").replace("-", "")
    marker = f"contract-{uuid.uuid4().hex[:8]}"
    spec = loom.spec(f"""
name: {name}
roles:
  worker: {{instances: 2, command: 'sleep 300; : {marker}'}}
  ps: {{command: 'sleep 300; : {marker}'}}
""")
    h = backend.start(spec)
    try:
        loom.wait_running(timeout=90)
        # a task's marked processes are more than its shell (its guard, an
        # `__exec` not yet replaced): wait for 3 tasks' agents, not for 3 pids
        # one reading, waited for: two readings can differ while a task's
        # guard is between its fork and its exec
        def three_agents():
            a = agents_of(marked(marker))
            return a if len(a) == 3 else None

        agents = loom.wait_for(three_agents, timeout=30,
                               what="the 3 tasks' shells under 3 agents (an agent a task)")
        t0 = time.monotonic()
        r = backend.stop(h, how)
        assert r.returncode == 130, r.stdout + r.stderr
        assert time.monotonic() - t0 < 10
    finally:
        backend.cleanup(h)
    # the coordinator records the end (on Slurm, Ctrl-C cancels the job in
    # Slurm and `loom run` returns at once: the coordinator in the
    # allocation writes it a moment later)
    loom.wait_for(lambda: loom.state()["state"] == "killed", timeout=20, what="state killed")
    nothing_left(loom, marker)
    loom.wait_for(lambda: not [p for p in agents if Path(f"/proc/{p}").exists()], timeout=20,
                  what="the job's agents to end")
    backend.after_kill(name)


def test_loom_kill_leaves_nothing_running(backend, loom):
    kill_case(backend, loom, "loom kill")


# Ctrl-C on `loom run`; on Spark the driver's own stop (an exception in it,
# a timeout) is test_spark's test_stopping_from_the_driver_leaves_nothing:
# there is no `loom run` to interrupt.
@only("local", "slurm", "yarn")
def test_ctrl_c_leaves_nothing_running(backend, loom):
    kill_case(backend, loom, "ctrl-c")


# ---- (4) restart: task -------------------------------------------------------

def test_restart_restarts_only_the_failed_task(backend, loom):
    # the failed task alone gets a new launch and attempt; its peer keeps
    # running in its first
    spec = loom.spec("""
name: contractrestart
restart: task
max_restarts: 2
roles:
  worker: {instances: 2, command: 'if [ $LOOM_INDEX = 1 ] && [ $LOOM_ATTEMPT = 0 ]; then exit 5; fi; sleep 1; echo "ran $LOOM_TASK attempt=$LOOM_ATTEMPT"'}
""")
    r = backend.run(spec)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = sorted(l.split("] ", 1)[1] for l in r.stdout.splitlines() if "] ran " in l)
    assert ran == ["ran worker:0 attempt=0", "ran worker:1 attempt=1"], r.stdout
    ev = loom.events()
    assert [e["task"] for e in ev if e["event"] == "restarting"] == ["worker:1"]
    fails = [e for e in ev if e["event"] == "failed"]
    assert [(e["task"], e["attempt"], e["exit_code"]) for e in fails] == [("worker:1", 0, 5)]
    st = loom.state()
    assert st["state"] == "succeeded" and st["attempt"] == 0  # the job's attempt: no retry
    backend.after_restart(ev)
