"""A task's output and large messages reach the coordinator whole.

Issue 18 item 1: a task that printed more than about 64 KiB at once used to
lose its agent's connection (the coordinator's reader kept its handshake
cap after authentication). Every line must arrive, in order; an over-long
line is cut at LOOM_MAX_LOG_LINE and marked; a 1 MiB KV value and a large
event pass; a flood of output is held back (the task blocks), never
dropped."""
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess

from conftest import BUILD, LOOM
from test_security import closed, frame, read_frame


def task_log_lines(job_dir, task):
    """The lines of logs/<task>.log after loom's attempt header."""
    lines = (job_dir / "logs" / f"{task}.log").read_bytes().split(b"\n")
    assert lines[0].startswith(b"=== loom: "), lines[0][:80]
    assert lines[-1] == b"", "the log does not end with a newline"
    return lines[1:-1]


def test_chatty_workers_succeed_with_every_line(loom):
    # the reproduction from the issue: 200,000 lines from each of 2 workers
    spec = loom.spec('name: chatty\nroles:\n  worker: {instances: 2, command: "seq 1 200000"}\n')
    r = loom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    want = [str(i).encode() for i in range(1, 200001)]
    for w in ("worker-0", "worker-1"):
        assert task_log_lines(loom.job_dir(), w) == want
    # the console got them too, each prefixed
    out = r.stdout.splitlines()
    assert sum(1 for l in out if l.startswith("[worker:0] ")) == 200000
    assert sum(1 for l in out if l.startswith("[worker:1] ")) == 200000


def test_100mb_of_output_as_fast_as_possible_loses_nothing(loom):
    # seq 1 12500000 writes 101,388,897 bytes as fast as the pipe takes them
    n = 12_500_000
    spec = loom.spec(f'name: flood\nroles:\n  worker: {{command: "seq 1 {n}"}}\n')
    p = subprocess.Popen([str(LOOM), "run", str(spec)], env=loom.env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    path = loom.job_dir() / "logs" / "worker-0.log"
    # compare with seq's own output byte for byte, without holding 100 MB twice
    with open(path, "rb") as f:
        header = f.readline()
        assert header.startswith(b"=== loom: worker:0 attempt 0")
        ref = subprocess.Popen(["seq", "1", str(n)], stdout=subprocess.PIPE)
        total = 0
        while True:
            a = ref.stdout.read(1 << 20)
            b = f.read(len(a)) if a else f.read(1)
            assert a == b, f"the log differs from seq's output after {total} bytes"
            if not a:
                break
            total += len(a)
        ref.wait()
    assert total == 101_388_897
    assert "closed the connection" not in err


def test_over_long_lines_are_cut_and_marked(loom):
    script = ("import sys; w = sys.stdout.write\n"
              "w('short-before\\n'); w('x' * 5000 + '\\n'); w('short-after\\n')\n"
              "w('y' * 2500); sys.stdout.flush(); w('z' * 2500 + 'tail\\n'); w('last\\n')\n")
    (loom.tmp / "long.py").write_text(script)
    spec = loom.spec(f"name: longlines\nroles:\n  worker: {{command: [/usr/bin/python3, {loom.tmp / 'long.py'}]}}\n")
    r = loom.run("run", spec, env={"LOOM_MAX_LOG_LINE": "1000"})
    assert r.returncode == 0, r.stderr
    mark = b" [loom: line cut at 1000 bytes (LOOM_MAX_LOG_LINE)]"
    assert task_log_lines(loom.job_dir(), "worker-0") == [
        b"short-before", b"x" * 1000 + mark, b"short-after", b"y" * 1000 + mark, b"last"]


def test_a_1mib_kv_value_and_a_large_event_pass(loom):
    probe = BUILD / "tests/system/kvprobe"
    spec = loom.spec(f"name: kvbig\nroles:\n  worker: {{instances: 3, command: [{probe}]}}\n")
    r = loom.run("run", spec, env={"KVPROBE_BIG": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(re.findall(r"KVBIG rank=(\d) bytes=1048576", r.stdout)) == ["0", "1", "2"]
    evs = [e for e in loom.events() if e["event"] == "probe_big"]
    assert sorted(e["rank"] for e in evs) == [0, 1, 2]
    assert all(len(e["blob"]) == 512 << 10 and set(e["blob"]) == {"abc"[e["rank"]]} for e in evs)


def test_an_oversized_frame_is_refused_and_the_close_logged(loom):
    # a client that authenticates, then sends a frame over LOOM_MAX_FRAME: the
    # coordinator closes that connection, says why, and the job goes on
    spec = loom.spec("name: frame\nroles:\n  worker: {command: 'sleep 4; echo survived'}\n")
    p = loom.popen("run", spec, env={"LOOM_MAX_FRAME": "200000"})
    try:
        loom.wait_running()
        jd = loom.job_dir()
        host, port = json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)
        secret = (jd / "secret").read_text().encode()
        s = socket.create_connection((host, int(port)), timeout=5)
        t, _, nonce = read_frame(s)
        assert t == 1  # CHALLENGE
        mine = os.urandom(32)
        s.sendall(frame(2, blob=hmac.new(secret, b"loom-c" + nonce, hashlib.sha256).digest() + mine))
        assert read_frame(s)[0] == 3  # AUTH_OK
        # 300,000 bytes, sent whole: over the limit of 200,000
        s.sendall(frame(30, js=b'{"task": "intruder"}', blob=b"p" * 300000))
        assert closed(s, timeout=5)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "[worker:0] survived" in out
    assert re.search(r"closed the connection of an unidentified peer: it sent (more than its "
                     r"200000-byte frame limit allows|a malformed or oversized frame)", err), err
