"""Fixtures for loom's system tests: real loom processes, real jobs.

Each test gets its own LOOM_HOME; helpers run `loom` and read job
directories the way a user would."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOOM_BUILD_DIR", "build")  # absolute stays absolute
LOOM = BUILD / "loom"


def sanitized(build=BUILD):
    """Whether a build directory is the AddressSanitizer + UBSan build."""
    cache = build / "CMakeCache.txt"
    return cache.exists() and "LOOM_SANITIZE:BOOL=ON" in cache.read_text()


SANITIZED = sanitized()
# Python loads libloom by ctypes from the build under test. An ASan library
# in an uninstrumented interpreter needs the ASan runtime loaded first: see
# pylib_env().
LIBLOOM = Path(os.environ.get("LOOM_PY_LIB", BUILD / "libloom.so"))
# libstdc++ preloaded with it: an interpreter that loads C++ (torch) after
# ASan started has no __cxa_throw for ASan's interceptor ("CHECK failed:
# ... real___cxa_throw").
ASAN_RUNTIME = " ".join(subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True,
                                       text=True).stdout.strip()
                        for lib in ("libasan.so", "libstdc++.so.6")) if SANITIZED else ""

# Sanitizer reports go to files in SAN_DIR (log_path), from every process
# these tests start, whether or not anyone checks its exit status (services,
# detached coordinators, torn-down agents); check_sanitizer_reports fails
# the test during which one appeared, and pytest_sessionfinish the session
# for any that appear later. UBSan in GCC's combined ASan + UBSan runtime
# ignores log_path and reports on stderr: the loom fixture scans the job
# directories' logs and `loom` commands' stderr for those.
SAN_DIR = Path(tempfile.mkdtemp(prefix="loom-sanitizer-"))
for _var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    os.environ[_var] = ":".join(filter(None, (os.environ.get(_var), f"log_path={SAN_DIR}/report")))


def pylib_env():
    """Environment for a Python process that loads libloom by ctypes. Under
    the sanitized build: the ASan runtime preloaded (it must come first in an
    uninstrumented interpreter) and leak checking off (the interpreter's own
    allocations at exit are not loom's); reports still go to SAN_DIR."""
    if not SANITIZED:
        return {}
    return {"LD_PRELOAD": ASAN_RUNTIME,
            "ASAN_OPTIONS": os.environ["ASAN_OPTIONS"] + ":detect_leaks=0"}


def yaml_env(extra):
    """A spec's `env:` flow map: pylib_env() and extra."""
    return "{" + ", ".join(f'{k}: "{v}"' for k, v in {**pylib_env(), **extra}.items()) + "}"


SAN_REPORT = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|: runtime error: |"
                        r"SUMMARY: (Address|UndefinedBehavior)Sanitizer")


def sanitizer_reports(where, logs_only=False):
    """(path, first lines) for every sanitizer report in where: any non-empty
    file in it (a log_path directory), or with logs_only the *.log files under
    it (job directories' task, coordinator and agent logs) that hold one."""
    out = []
    for p in sorted(Path(where).rglob("*.log") if logs_only else Path(where).glob("*")):
        if not p.is_file():
            continue
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        m = SAN_REPORT.search(text)
        if m or (text.strip() and not logs_only):
            start = text.rfind("\n", 0, m.start()) + 1 if m else 0
            out.append((p, "\n".join(text[start:].splitlines()[:12])))
    return out


def _san_fail(reports):
    return "sanitizer report(s):\n" + "\n\n".join(f"--- {p}\n{first}" for p, first in reports)


@pytest.fixture(autouse=True)
def check_sanitizer_reports():
    yield
    time.sleep(0.05 if SANITIZED else 0)  # a report being written as the test ended
    found = sanitizer_reports(SAN_DIR)
    seen = SAN_DIR / "seen"
    for p, _ in found:
        seen.mkdir(exist_ok=True)
        p.rename(seen / p.name)
    if found:
        pytest.fail(_san_fail(found), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    late = sanitizer_reports(SAN_DIR)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if late:
        if tr:
            tr.write_line("\nafter the last test, " + _san_fail(late), red=True)
        session.exitstatus = 1
    if not (SAN_DIR / "seen").exists() and not late:
        shutil.rmtree(SAN_DIR, ignore_errors=True)
    elif tr:
        tr.write_line(f"\nsanitizer reports are kept in {SAN_DIR}")


# Skips are listed (-rs). In CI (CI=1, or LOOM_NO_SKIP=1 that scripts/test.sh
# sets) a skip is a failure unless its reason is something scripts/setup.sh
# cannot provide: a GPU, or what the kernel is built or booted with (a
# cgroup v2 hierarchy with the memory controller).
NO_SKIP = os.environ.get("CI") == "1" or os.environ.get("LOOM_NO_SKIP") == "1"
SKIP_ALLOWED = re.compile(r"\bGPUs?\b|CUDA|runs in the (normal|ASan/UBSan) pass|cgroup2 here has no memory "
                          r"controller", re.I)


def pytest_configure(config):
    if not any(c in config.option.reportchars for c in "saA"):
        config.option.reportchars += "s"
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr:
            from _pytest.terminal import getreportopt
            tr.reportchars = getreportopt(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if NO_SKIP and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if not SKIP_ALLOWED.search(reason):
            rep.outcome = "failed"
            rep.longrepr = (f"skipped, but skips fail in CI (CI=1 or LOOM_NO_SKIP=1) unless "
                            f"scripts/setup.sh cannot provide the dependency: {reason}")


class Loom:
    def __init__(self, home: Path, tmp: Path):
        self.home = home
        self.tmp = tmp
        self.env = dict(os.environ, LOOM_HOME=str(home), NO_COLOR="1")
        self.san_reports = []  # sanitizer reports seen in `loom` commands' stderr
        for k in ("LOOM_COORD", "LOOM_SECRET", "LOOM_TASK", "RANK", "WORLD_SIZE"):
            self.env.pop(k, None)

    def spec(self, text: str, name: str = "job.yaml") -> Path:
        p = self.tmp / name
        p.write_text(text)
        return p

    def run(self, *args, timeout=120, env=None, **kw):
        e = dict(self.env, **(env or {}))
        r = subprocess.run([str(LOOM), *map(str, args)], env=e, capture_output=True,
                           text=True, timeout=timeout, **kw)
        m = SAN_REPORT.search(r.stderr or "")
        if m:
            self.san_reports.append((f"stderr of loom {' '.join(map(str, args))}",
                                     r.stderr[m.start():][:2000]))
        return r

    def popen(self, *args, env=None, **kw):
        e = dict(self.env, **(env or {}))
        return subprocess.Popen([str(LOOM), *map(str, args)], env=e, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)

    def jobs(self):
        d = self.home / "jobs"
        return sorted(d.iterdir()) if d.exists() else []

    def job_dir(self) -> Path:
        js = self.jobs()
        assert len(js) == 1, f"expected one job, found {js}"
        return js[0]

    def state(self, job_dir=None):
        return json.loads(((job_dir or self.job_dir()) / "state.json").read_text())

    def events(self, job_dir=None):
        lines = ((job_dir or self.job_dir()) / "events.jsonl").read_text().splitlines()
        return [json.loads(l) for l in lines]

    def wait_running(self, timeout=20, what="tasks running"):
        """Waits until the one job's state.json shows every task running."""
        return self.wait_for(lambda: self.jobs() and (self.job_dir() / "state.json").exists() and
                             all(t["state"] == "running" for t in self.state()["tasks"]),
                             timeout=timeout, what=what)

    def wait_for(self, pred, timeout=20, what="condition"):
        """pred()'s first true value within timeout seconds. A file pred
        reads that is not there yet (a job directory's state.json before the
        coordinator wrote it) is the condition not met yet, not an error."""
        end = time.time() + timeout
        missing = None
        while time.time() < end:
            try:
                v = pred()
            except FileNotFoundError as e:
                v, missing = None, e
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}" +
                             (f" (last: {missing})" if missing else ""))


STATUS_KEYS = ("job", "state", "attempt", "elapsed", "dir", "web", "cert", "tboard", "cause")
STATUS_COLS = ("TASK", "STATE", "ATTEMPT", "ADDRESS", "EXIT", "ELAPSED", "REASON")
DURATION = r"\d+\.\ds|\d+m\d\ds|\d+h\d\dm"


def table(lines, cols):
    """Rows (dicts) of a table whose first line is the header cols, each
    cell where its header starts, none spilling into the next."""
    assert lines and lines[0].split() == list(cols), lines[:1]
    starts = [lines[0].index(c) for c in cols]
    rows = []
    for l in lines[1:]:
        for i, s in enumerate(starts[1:], 1):  # the last cell may be empty
            assert l[s - 1:s] == " " and (l[s:s + 1].strip() or i == len(cols) - 1), (cols[i], l)
        rows.append({c: l[a:b].strip() for c, a, b in zip(cols, starts, starts[1:] + [None])})
    return rows


def parse_status(out):
    """`loom status JOB`'s output, checked line by line: job, state, attempt,
    elapsed and dir, then web, cert, tboard and cause where they apply, in that
    order, values in column 9; a blank line; the task table, one row per
    task. Returns ({key: value}, [row, ...])."""
    assert out.endswith("\n"), out
    lines = out[:-1].split("\n")
    blank = lines.index("")
    head = {}
    for l in lines[:blank]:
        key = l[:9].rstrip()
        assert key in STATUS_KEYS and l[9:10].strip(), l
        head[key] = l[9:]
    assert list(head) == [k for k in STATUS_KEYS if k in head] and \
        list(head)[:5] == list(STATUS_KEYS[:5]), out
    assert re.fullmatch(DURATION, head["elapsed"]), out
    rows = table(lines[blank + 1:], STATUS_COLS)
    for r in rows:
        assert re.fullmatch(r"-|\d+\.\d+\.\d+\.\d+:\d+", r["ADDRESS"]), r
        assert re.fullmatch("-|" + DURATION, r["ELAPSED"]), r
    return head, rows


def loom_pids_of(home: Path):
    """Pids of every process whose environment or command line names this
    LOOM_HOME's jobs: coordinators, agents and user processes."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
            cmd = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if str(home).encode() in env or str(home).encode() in cmd:
            try:
                st = (p / "stat").read_text()
            except OSError:
                continue
            if st.split(")")[-1].split()[0] != "Z":
                out.append(int(p.name))
    return out


# The TensorFlow environment (scripts/setup-tf.sh; scripts/test.sh makes it
# and exports LOOM_TF_PYTHON). Its tests run in the normal pass only: an
# ASan runtime preloaded into TensorFlow's interpreter costs minutes per job
# and tests loom's C code no further than the other tests do.
TF_PYTHON = Path(os.environ.get("LOOM_TF_PYTHON", ROOT / ".venv-tf" / "bin" / "python"))


@pytest.fixture
def tf_python():
    """The TensorFlow environment's interpreter, for a task's command."""
    if SANITIZED:
        pytest.skip("TensorFlow under loom runs in the normal pass")
    if not TF_PYTHON.exists():
        pytest.skip(f"no TensorFlow environment at {TF_PYTHON}: run scripts/setup-tf.sh")
    return TF_PYTHON


@pytest.fixture
def loom(tmp_path):
    assert LOOM.exists(), f"build loom first: {LOOM} is missing"
    home = tmp_path / "home"
    home.mkdir()
    l = Loom(home, tmp_path)
    yield l
    # reports that went to a job's logs (a spec env: that replaced ASAN_OPTIONS)
    found = sanitizer_reports(home, logs_only=True) + l.san_reports
    # Nothing may outlive a test's jobs. A process the kernel is ending
    # (a task whose agent was SIGKILLed gets its parent-death signal) may
    # still be listed for a moment on a loaded machine (CI saw one): what
    # is left 5 s after the test is a process that outlived it.
    left = loom_pids_of(home)
    end = time.monotonic() + 5
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = loom_pids_of(home)
    what = {}
    for pid in left:
        try:
            what[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    assert not left, f"processes outlived the test: {what or left}"
    assert not found, _san_fail(found)


# ---- the clusters (tests/system/clusters.py): each started once per test run

@pytest.fixture(scope="session")
def hadoop(tmp_path_factory):
    """The test run's one Hadoop cluster (YARN and HDFS), started when a
    test first needs it and stopped at the end of the run, no JVM of it
    left. Tests share it: each uses paths of its own on HDFS."""
    from clusters import start_hadoop, stop_hadoop
    shared = os.environ.get("LOOM_TEST_HADOOP_DIR")
    if shared:
        # started (and stopped after the run) by scripts/test.sh, which
        # starts it while the fuzzers run
        d = Path(shared)
        if not (d / "conf" / "core-site.xml").exists():
            pytest.fail(f"LOOM_TEST_HADOOP_DIR={d} holds no started Hadoop cluster")
        yield d
        return
    d = tmp_path_factory.mktemp("hadoop")
    start_hadoop(d)
    try:
        yield d
    finally:
        stop_hadoop(d)


@pytest.fixture(scope="session")
def hadoop_hosts(tmp_path_factory):
    """The test run's one Hadoop cluster on hosts of their own (clusters.py's
    HadoopHosts: the RM and the NameNode on one network namespace, a
    NodeManager and a DataNode on each of two more, in mount namespaces that
    hide what a stock node lacks; the client is this process, with an
    address on their bridge). Started when a test first needs it, stopped
    at the end of the run: no JVM, namespace or link of it left."""
    from clusters import HadoopHosts, hadoop_available
    from netns import available
    if not hadoop_available():
        pytest.skip("needs java and mvn (scripts/setup.sh) for Hadoop")
    why = available()
    if why:
        pytest.skip(why)
    h = HadoopHosts(tmp_path_factory.mktemp("hadoop-hosts")).start()
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="session")
def yarn(hadoop):
    """The Hadoop cluster's YARN side: RM + 2 NodeManagers (nm1 labelled gpu)."""
    from clusters import Yarn
    return Yarn(hadoop)


@pytest.fixture(scope="session")
def hdfs(hadoop):
    """The Hadoop cluster's HDFS side: NameNode + 2 DataNodes, and Hadoop's
    Java client (FsShell) on its classpath as the reference."""
    from clusters import Hdfs, hadoop_classpath
    return Hdfs(hadoop, hadoop_classpath())


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The test run's Slurm cluster of the default shape (clusters.py's
    SlurmCluster: 3 nodes of 4 CPUs), started when a test first needs it,
    for test_slurm and test_contract; a cluster of another shape is a
    module's own (test_slurm_place)."""
    from clusters import SlurmCluster, available
    if not available():
        pytest.skip("slurm-wlm and munge are not installed")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield c
    finally:
        c.stop()


# ---- YARN jobs (test_yarn and the modules beside it) ----

def loom_procs(home):
    """(pid, command line) of loom agents and of their tasks' marker
    processes still alive: agents of this build, the test's marked tasks
    (their LOOM_JOB_DIR is under home: not another test run's on this
    machine), and the agent of each (in a container an agent runs the copy
    of loom that YARN localized, ./loom, not this build's)."""
    out, marked = [], []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().split(b"\0")
                ours = str(home).encode() in (p / "environ").read_bytes()
            except OSError:
                continue
            mine = ours and any(b"yarn-marker" in c for c in cmd)
            if mine:
                marked.append(int(p.name))
            # an agent of this build with this test's LOOM_HOME: the CI runs
            # another pass of the same build at the same time
            if mine or (ours and cmd[:2] == [str(LOOM.resolve()).encode(), b"agent"]):
                out.append((int(p.name), cmd))
    for pid in marked:  # the agent among each marked task's ancestors
        while pid > 1:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if cmd[1:2] == [b"agent"] and cmd[0].endswith(b"loom"):
                    if pid not in [p for p, _ in out]:
                        out.append((pid, cmd))
                    break
                pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
            except (OSError, IndexError, ValueError):
                break
    return out


@pytest.fixture
def yloom(loom, yarn):
    """loom with the one-host YARN cluster's HADOOP_CONF_DIR; afterwards, nothing
    of the test is left running in YARN or on this machine."""
    loom.env["HADOOP_CONF_DIR"] = str(yarn.conf)
    yield loom
    # whatever the test did, nothing of it is left running in YARN or here
    # (the RM's reports move to an application's final state a moment after
    # the AM unregistered: CI saw RUNNING just after a job ended)
    live = []

    def none_live():
        live[:] = [a for a in yarn.apps() if a["state"] in ("NEW", "NEW_SAVING", "SUBMITTED",
                                                             "ACCEPTED", "RUNNING")]
        return not live
    try:
        loom.wait_for(none_live, timeout=15, what="no live YARN application")
    except AssertionError:
        pass
    assert not live, live
    left = []
    for _ in range(50):
        left = loom_procs(loom.home)
        if not left:
            break
        time.sleep(0.1)
    assert not left, left
    # what agents and coordinators in containers wrote (the container's
    # stdout and stderr, in the NodeManagers' log directories): no
    # sanitizer report there either
    for f in yarn.dir.glob("nm*/logs/application_*/container_*/std*"):
        text = f.read_text(errors="replace")
        m = SAN_REPORT.search(text)
        assert not m, f"{f}:\n{text[m.start():][:3000]}"


def no_process_left(yloom):
    """The managed AM's container (its launch script, the coordinator) ends
    when the application does: within a few seconds of FINISHED."""
    yloom.wait_for(lambda: not loom_pids_of(yloom.home), timeout=15,
                   what="the application master's container processes to end")
