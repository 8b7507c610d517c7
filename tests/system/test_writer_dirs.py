"""A writer to HDFS works in a local directory of its own under TMPDIR
(loom-ckpt-*, loom-summary-*, loom-feed-out-*, loom-ps-*: src/fs/tmpdir.c),
locked for its life. One SIGKILLed leaves it behind; the next writer of the
same kind to open removes it, and never a live writer's.

Real writers (examples/ckpt-demo's ckpt-demo and summary-demo) against the
test run's HDFS (conftest's `hdfs`), each under the test's own TMPDIR, so
what is there is theirs alone.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD

CKPT = BUILD / "examples/ckpt-demo/ckpt-demo"
SUMMARY = BUILD / "examples/ckpt-demo/summary-demo"


def dirs(scratch: Path, kind: str):
    return sorted(p for p in scratch.glob(f"loom-{kind}-??????") if p.is_dir())


def wait_for(pred, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Writers:
    """Writer processes of one test, each SIGKILLed at the end if still there."""

    def __init__(self, env):
        self.env = env
        self.procs = []

    def start(self, *argv):
        p = subprocess.Popen([str(a) for a in argv], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def kill(self, p):
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        assert p.returncode == -signal.SIGKILL, p.returncode

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                self.kill(p)


@pytest.fixture
def writers(hdfs, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    w = Writers(dict(os.environ, HADOOP_CONF_DIR=str(hdfs.conf), TMPDIR=str(scratch)))
    w.scratch = scratch
    yield w
    w.close()


def new_dir(w, kind, before, p):
    """The directory writer p made: the one of kind not in before."""
    def made():
        assert p.poll() is None, p.communicate()
        new = [d for d in dirs(w.scratch, kind) if d not in before]
        return new[0] if len(new) == 1 else None
    return wait_for(made, f"the {kind} writer's directory")


def test_a_killed_checkpoint_writers_directory_goes_at_the_next_open(hdfs, writers):
    url = hdfs.url(f"/writer-dirs-ckpt-{os.getpid()}")
    s = writers.scratch
    # A saves until killed: its directory (with a checkpoint in it, or part
    # of one) stays behind
    a = writers.start(CKPT, "save", url, "--keep", "2", "--kib", "256")
    da = new_dir(writers, "ckpt", [], a)
    wait_for(lambda: any(da.iterdir()), "a file in the saver's directory")
    writers.kill(a)
    assert dirs(s, "ckpt") == [da]
    # B opens: A's goes, B's is made
    b = writers.start(CKPT, "save", url, "--keep", "2", "--kib", "256")
    db = new_dir(writers, "ckpt", [da], b)
    assert not da.exists(), "the dead saver's directory is still there"
    # C opens while B lives: two writers at once, neither's directory goes
    c = writers.start(CKPT, "save", url, "--keep", "2", "--kib", "256")
    dc = new_dir(writers, "ckpt", [db], c)
    assert db.exists() and b.poll() is None
    assert dirs(s, "ckpt") == sorted([db, dc])
    # both killed; one more saver, to the end, removes theirs and its own
    writers.kill(b)
    writers.kill(c)
    r = subprocess.run([str(CKPT), "save", url, "--count", "1", "--keep", "2", "--kib", "256"],
                       env=writers.env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("saved "), r.stdout + r.stderr
    assert dirs(s, "ckpt") == [], list(s.iterdir())
    assert list(s.iterdir()) == [], list(s.iterdir())


def test_a_killed_summary_writers_directory_goes_at_the_next_open(hdfs, writers):
    # a run directory each: two writers of one host in the same second
    # would choose the same event file name
    url = hdfs.url(f"/writer-dirs-tb-{os.getpid()}")
    s = writers.scratch
    a = writers.start(SUMMARY, f"{url}/a", "--steps", "5", "--hold", "60")
    da = new_dir(writers, "summary", [], a)
    wait_for(lambda: any(da.iterdir()), "the event file in the writer's directory")
    writers.kill(a)
    assert dirs(s, "summary") == [da]
    # a live writer meanwhile: the next open must leave its directory
    b = writers.start(SUMMARY, f"{url}/b", "--steps", "5", "--hold", "60")
    db = new_dir(writers, "summary", [da], b)
    assert not da.exists(), "the dead writer's directory is still there"
    r = subprocess.run([str(SUMMARY), f"{url}/c", "--steps", "5"], env=writers.env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert dirs(s, "summary") == [db] and b.poll() is None
    writers.kill(b)
    r = subprocess.run([str(SUMMARY), f"{url}/d", "--steps", "5"], env=writers.env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(s.iterdir()) == [], list(s.iterdir())
