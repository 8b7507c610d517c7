"""Fixtures for loom's system tests: real loom processes, real jobs.

Each test gets its own LOOM_HOME; helpers run `loom` and read job
directories the way a user would."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("LOOM_BUILD_DIR", "build")  # absolute stays absolute
LOOM = BUILD / "loom"
# Python loads libloom by ctypes from the normal build: an ASan-instrumented
# library cannot be loaded into an uninstrumented interpreter.
LIBLOOM = Path(os.environ.get("LOOM_PY_LIB", ROOT / "build" / "libloom.so"))


class Loom:
    def __init__(self, home: Path, tmp: Path):
        self.home = home
        self.tmp = tmp
        self.env = dict(os.environ, LOOM_HOME=str(home), NO_COLOR="1")
        for k in ("LOOM_COORD", "LOOM_SECRET", "LOOM_TASK", "RANK", "WORLD_SIZE"):
            self.env.pop(k, None)

    def spec(self, text: str, name: str = "job.yaml") -> Path:
        p = self.tmp / name
        p.write_text(text)
        return p

    def run(self, *args, timeout=120, env=None, **kw):
        e = dict(self.env, **(env or {}))
        return subprocess.run([str(LOOM), *map(str, args)], env=e, capture_output=True,
                              text=True, timeout=timeout, **kw)

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
        end = time.time() + timeout
        while time.time() < end:
            v = pred()
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


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


@pytest.fixture
def loom(tmp_path):
    assert LOOM.exists(), f"build loom first: {LOOM} is missing"
    home = tmp_path / "home"
    home.mkdir()
    l = Loom(home, tmp_path)
    yield l
    # Nothing may outlive a test's jobs.
    left = loom_pids_of(home)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes outlived the test: {left}"
