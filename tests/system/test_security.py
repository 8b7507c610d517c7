"""Every connection to the coordinator authenticates first; bad bytes, or
none at all within the auth timeout, close that connection and leave the
job undisturbed."""
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import LOOM

AUTH_TIMEOUT = 5.0  # LOOM_AUTH_TIMEOUT's default, seconds

def frame(t, js=b"", blob=b""):
    return struct.pack(">IHHI", 8 + len(js) + len(blob), t, 0, len(js)) + js + blob


def read_frame(s):
    hdr = b""
    while len(hdr) < 12:
        c = s.recv(12 - len(hdr))
        if not c:
            return None
        hdr += c
    ln, t, _, jl = struct.unpack(">IHHI", hdr)
    body = b""
    while len(body) < ln - 8:
        c = s.recv(ln - 8 - len(body))
        if not c:
            return None
        body += c
    return t, body[:jl], body[jl:]


def closed(s, timeout=3):
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_bad_connections_leave_the_job_undisturbed(loom):
    spec = loom.spec("""
name: sec
roles:
  worker: {instances: 2, command: 'sleep 10; echo survived'}
""")
    p = loom.popen("run", spec)
    loom.wait_running()
    jd = loom.job_dir()
    host, port = json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)
    secret = (jd / "secret").read_text().encode()
    addr = (host, int(port))

    # 0. silent (connects, reads the challenge, sends nothing): still open
    # just before the auth timeout, closed soon after it
    s = socket.create_connection(addr)
    t0 = time.monotonic()
    t, _, nonce = read_frame(s)
    assert t == 1 and len(nonce) == 32
    s.settimeout(AUTH_TIMEOUT - 0.25)
    with pytest.raises(socket.timeout):
        s.recv(1)
    assert closed(s, timeout=2.5)
    took = time.monotonic() - t0
    assert AUTH_TIMEOUT - 0.25 <= took < AUTH_TIMEOUT + 2.0, took

    # 1. wrong secret: closed after the challenge
    s = socket.create_connection(addr)
    t, _, nonce = read_frame(s)
    assert t == 1 and len(nonce) == 32
    mac = hmac.new(b"0" * 64, b"loom-c" + nonce, hashlib.sha256).digest()
    s.sendall(frame(2, blob=mac + os.urandom(32)))
    assert closed(s)

    # 2. a message before authenticating (a registration): closed
    s = socket.create_connection(addr)
    read_frame(s)
    s.sendall(frame(10, json.dumps({"task": "worker:0", "attempt": 0, "host": "x",
                                    "port": 1}).encode()))
    assert closed(s)

    # 3. an oversized length: closed at once, nothing allocated
    s = socket.create_connection(addr)
    read_frame(s)
    s.sendall(struct.pack(">I", 0x7FFFFFFF) + b"\0" * 8)
    assert closed(s)

    # 4. garbage
    s = socket.create_connection(addr)
    read_frame(s)
    s.sendall(os.urandom(200))
    assert closed(s)

    # 5. authenticated, then malformed JSON and an unknown type: closed
    for bad in (frame(30, b"{not json"), frame(63), frame(31, b"[1,2]")):
        s = socket.create_connection(addr)
        _, _, nonce = read_frame(s)
        mine = os.urandom(32)
        s.sendall(frame(2, blob=hmac.new(secret, b"loom-c" + nonce, hashlib.sha256).digest() + mine))
        t, _, proof = read_frame(s)
        assert t == 3 and proof == hmac.new(secret, b"loom-s" + mine, hashlib.sha256).digest()
        s.sendall(bad)
        assert closed(s)

    # 6. authenticated, but claims a task that is already registered: refused
    s = socket.create_connection(addr)
    _, _, nonce = read_frame(s)
    s.sendall(frame(2, blob=hmac.new(secret, b"loom-c" + nonce, hashlib.sha256).digest() +
                    os.urandom(32)))
    read_frame(s)
    s.sendall(frame(10, json.dumps({"task": "worker:0", "attempt": 0, "host": "127.0.0.1",
                                    "port": 1, "pid": 1}).encode()))
    assert closed(s)

    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert err.count("before it authenticated: it did not authenticate in time") == 1, err
    assert out.count("survived") == 2
    assert loom.state()["state"] == "succeeded"


def as_nobody(*cmd):
    """Runs cmd as uid/gid 65534 with no supplementary groups."""
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd],
                          capture_output=True, text=True, timeout=30)


def test_job_directory_is_private_to_its_owner(loom):
    """The job directory holds the secret, the dashboard token (in the
    events) and the logs: another local user reads none of it."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to try another uid")
    # a LOOM_HOME another user could reach: only loom's modes keep them out
    home = Path(tempfile.mkdtemp(prefix="loom-perms-", dir="/tmp"))
    try:
        os.chmod(home, 0o755)
        open(home / "world-readable", "w").close()
        os.chmod(home / "world-readable", 0o644)
        env = {"LOOM_HOME": str(home)}
        spec = loom.spec("name: perms\nroles:\n  worker: {command: 'echo the-task-output'}\n")
        r = loom.run("run", spec, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        jobs = home / "jobs"
        (jd,) = list(jobs.iterdir())
        mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
        assert mode(jobs) == 0o700
        for d in (jd, jd / "logs", jd / "tasks", jd / "tensorboard", jd / "output"):
            assert mode(d) == 0o700, d
        files = ["state.json", "events.jsonl", "coord.json", "secret", "spec.yaml",
                 "summary.txt", "logs/all.log", "logs/worker-0.log"]
        for f in files:
            assert mode(jd / f) == 0o600, f
        # the control: this other user can read what is world-readable here
        assert as_nobody("cat", str(home / "world-readable")).returncode == 0
        for f in ("state.json", "events.jsonl", "logs/worker-0.log", "secret"):
            c = as_nobody("cat", str(jd / f))
            assert c.returncode != 0 and "Permission denied" in c.stderr, (f, c)
        c = as_nobody("ls", str(jobs))
        assert c.returncode != 0 and "Permission denied" in c.stderr, c
        # the owner still sees everything through loom
        s = loom.run("status", jd.name, env=env)
        assert s.returncode == 0 and "worker:0" in s.stdout, s
        g = loom.run("logs", jd.name, env=env)
        assert g.returncode == 0 and "the-task-output" in g.stdout, g
    finally:
        shutil.rmtree(home, ignore_errors=True)


def authenticate(host, port, secret, timeout=5):
    """A client that holds the secret: connect, answer the challenge, check
    the coordinator's proof. Returns the connected socket."""
    s = socket.create_connection((host, port), timeout=timeout)
    t, _, nonce = read_frame(s)
    assert t == 1, t
    mine = os.urandom(32)
    s.sendall(frame(2, blob=hmac.new(secret, b"loom-c" + nonce, hashlib.sha256).digest() + mine))
    t, _, proof = read_frame(s)
    assert t == 3 and proof == hmac.new(secret, b"loom-s" + mine, hashlib.sha256).digest()
    return s


def test_idle_unauthenticated_connections_cannot_lock_peers_out(loom):
    # 5,000 connections that never say anything, held open; a peer with the
    # secret still gets in, every time (issue 18 item 2)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    spec = loom.spec("name: idle\nroles:\n  worker: {command: 'sleep 30'}\n")
    p = loom.popen("run", spec)
    held = []
    try:
        loom.wait_running()
        jd = loom.job_dir()
        host, port = json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)
        port = int(port)
        secret = (jd / "secret").read_text().encode()
        for i in range(5000):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, port))
            held.append(s)
        time.sleep(0.5)
        for attempt in range(7):
            t0 = time.time()
            s = authenticate(host, port, secret)
            s.close()
            assert time.time() - t0 < 3, f"handshake {attempt} took {time.time() - t0:.1f}s"
            for i in range(100):  # keep the pressure on between tries
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex((host, port))
                held.append(s)
        assert loom.state()["state"] == "running"
    finally:
        for s in held:
            s.close()
        loom.run("kill", "last")
        out, err = p.communicate(timeout=30)
    # the evictions were logged, but a few lines and a count, not thousands
    refused = [l for l in err.splitlines() if "before it authenticated" in l]
    assert 1 <= len(refused) <= 5 * 3, len(refused)
    assert re.search(r"\d+ more refused connections from 127\.0\.0\.1 in the last 10 s", err), err[-3000:]


def test_a_flood_of_failed_handshakes_gives_a_count_not_a_line_each(loom):
    spec = loom.spec("name: flood\nroles:\n  worker: {command: 'sleep 30'}\n")
    p = loom.popen("run", spec)
    try:
        loom.wait_running()
        jd = loom.job_dir()
        host, port = json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)
        n = 0
        t_end = time.time() + 3
        while time.time() < t_end:
            s = socket.create_connection((host, int(port)), timeout=5)
            t, _, nonce = read_frame(s)
            s.sendall(frame(2, blob=b"\0" * 64))  # a wrong MAC
            assert closed(s)
            s.close()
            n += 1
        assert n >= 200, n
    finally:
        loom.run("kill", "last")
        out, err = p.communicate(timeout=30)
    lines = [l for l in err.splitlines() if "authenticat" in l and "coord" in l]
    # at most 5 a 10 s window in full, then one count line per window
    assert len(lines) <= 5 + 2, lines[:20]
    counts = [int(m) for m in re.findall(r"(\d+) more refused connections from 127\.0\.0\.1 in the last 10 s", err)]
    assert counts and sum(counts) + len([l for l in lines if "failed authentication" in l]) == n, (counts, n)


# ---- the job secret stays secret (issue 17.3) -----------------------------

def secret_of(job_dir):
    s = (job_dir / "secret").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", s), s
    return s


def leaks(secret, texts):
    """The names of the texts that hold the secret or any 16 hex digits of it
    (a cut copy is a leak too; 16 random hex digits match by chance once in
    2^64)."""
    parts = [secret[i:i + 16] for i in range(0, len(secret) - 15, 4)]
    return [name for name, t in texts if any(p in t for p in parts)]


def job_files(job_dir):
    """Every file loom wrote in the job directory but `secret` itself (task
    working directories hold what the tasks wrote, not loom)."""
    out = []
    for p in sorted(job_dir.rglob("*")):
        rel = p.relative_to(job_dir)
        if p.is_file() and rel.parts != ("secret",) and rel.parts[0] != "tasks":
            out.append((str(rel), p.read_bytes().decode("utf-8", "replace")))
    return out


def loom_ps_lines():
    """`ps` as anyone on the host sees it: the command line of every loom
    process (coordinator, agents, ps shards, tasks' shells)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [("ps " + l.split(None, 1)[0], l) for l in out.splitlines()[1:]]


def test_the_secret_never_appears_in_what_loom_shows(loom):
    """Logs, events, state, the dashboard's pages and API, `loom status`,
    `events`, `logs`, the console, and `ps` of every process while the job
    runs: the secret is in none of them (only in the 0600 `secret` file and
    the tasks' own environment, which they need to authenticate)."""
    spec = loom.spec("""
name: secrets
restart: task
max_restarts: 1
roles:
  chief: {command: 'echo chief up; sleep 4'}
  worker:
    instances: 2
    command: 'echo "worker $LOOM_INDEX attempt $LOOM_ATTEMPT"; if [ $LOOM_INDEX = 1 ] && [ $LOOM_ATTEMPT = 0 ]; then exit 3; fi; sleep 3'
  ps: {command: [LOOM, ps]}
""".replace("LOOM", str(LOOM)))
    p = loom.popen("run", spec)
    jd = loom.wait_for(lambda: loom.jobs() and loom.jobs()[-1], what="the job directory")
    loom.wait_for(lambda: (jd / "secret").exists() and (jd / "state.json").exists(),
                  what="the job's secret and state")
    secret = secret_of(jd)
    seen = []
    loom.wait_running(timeout=20)
    seen += loom_ps_lines()
    url = json.loads((jd / "state.json").read_text())["dashboard"]
    base, token = url.split("/?token=")
    import urllib.request
    for path in ("/", "/api/job", "/api/tasks", "/api/metrics", "/api/events",
                 "/api/logs?task=worker:1", "/metrics"):
        sep = "&" if "?" in path else "?"
        try:
            with urllib.request.urlopen(f"{base}{path}{sep}token={token}", timeout=10) as r:
                seen.append((f"dashboard {path}", r.read().decode("utf-8", "replace")))
        except urllib.error.HTTPError as e:
            assert e.code == 404, (path, e.code)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, out + err
    seen += [("loom run stdout", out), ("loom run stderr", err)]
    job = jd.name
    for args in (("status", job), ("status", job, "--json"), ("events", job), ("logs", job),
                 ("logs", job, "--task", "worker:1")):
        r = loom.run(*args)
        assert r.returncode == 0, (args, r.stderr)
        seen += [(f"loom {' '.join(args)}", r.stdout + r.stderr)]
    files = job_files(jd)
    assert any(n == "events.jsonl" for n, _ in files) and any(n == "state.json" for n, _ in files)
    assert any(n.startswith("logs/") for n, _ in files), [n for n, _ in files]
    seen += files
    assert not leaks(secret, seen)
    # the check itself can fail: a text with the secret in it is caught
    assert leaks(secret, [("planted", f"x{secret[5:40]}y"), ("ok", "x")]) == ["planted"]
    # only when asked for it by name (what loom.spark gives its agents):
    # `status JOB --json --secret`, and nothing else
    r = loom.run("status", job, "--json", "--secret")
    assert r.returncode == 0 and json.loads(r.stdout)["secret"] == secret, r.stderr
    for bad in (("status", job, "--secret"), ("status", "--json", "--secret")):
        r = loom.run(*bad)
        assert r.returncode == 2 and secret not in r.stdout + r.stderr, (bad, r.returncode)
