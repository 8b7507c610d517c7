"""An agent and a coordinator of different protocol versions (a node that
runs another loom than the client's) refuse each other, with a message
that names both versions (issue 31 item 2). The other side is played by
Python speaking the wire (tests/system/test_security.py's frames and
handshake), since the build has only one loom."""
import hashlib
import hmac
import json
import os
import re
import socket
import subprocess

from conftest import LOOM, ROOT, loom_pids_of
from test_security import authenticate, frame, read_frame

VERSION = (ROOT / "VERSION").read_text().strip()
PROTOCOL = int(re.search(r"#define WIRE_PROTOCOL (\d+)",
                         (ROOT / "src/wire/wire.h").read_text()).group(1))
REGISTER, ASSIGN, FAIL, ABORT = 10, 11, 19, 36


def submit(loom, name):
    spec = loom.spec(f"name: {name}\nbackend: external\nroles:\n  worker: {{command: 'true'}}\n")
    r = loom.run("submit", spec)
    assert r.returncode == 0, r.stderr
    jd = loom.home / "jobs" / r.stdout.strip().splitlines()[-1]
    loom.wait_for(lambda: (jd / "coord.json").exists(), what="the coordinator's address")
    host, port = json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)
    return jd, host, int(port), (jd / "secret").read_text().strip().encode()


def coordinator_exits(loom):
    """The detached coordinator writes the failed state, then ends (under
    ASan its exit takes a moment): nothing of the job outlives it."""
    loom.wait_for(lambda: not loom_pids_of(loom.home), timeout=30,
                  what="the job's coordinator to exit")


def test_the_coordinator_refuses_an_agent_of_another_protocol(loom):
    jd, host, port, secret = submit(loom, "oldagent")
    s = authenticate(host, port, secret)
    reg = {"task": "worker:0", "attempt": 0, "host": "127.0.0.1", "port": 40000, "pid": 1,
           "protocol": PROTOCOL - 1, "version": "0.0.9"}
    s.sendall(frame(REGISTER, json.dumps(reg).encode()))
    got = read_frame(s)
    s.close()
    assert got is not None and got[0] == ABORT, got
    reason = json.loads(got[1])["reason"]
    assert (f"its agent is loom 0.0.9 (protocol {PROTOCOL - 1}) and the coordinator loom "
            f"{VERSION} (protocol {PROTOCOL})") in reason, reason
    # the task waited for that agent: the job fails with it, a backend
    # error, and says why
    loom.wait_for(lambda: loom.state(jd)["state"] in ("failed", "succeeded"),
                  what="the job to end")
    st = loom.state(jd)
    assert st["state"] == "failed", st
    r = loom.run("status", str(jd.name))
    assert f"loom 0.0.9 (protocol {PROTOCOL - 1})" in r.stdout + r.stderr, r.stdout + r.stderr
    coordinator_exits(loom)


def test_an_agent_without_a_protocol_is_refused_too(loom):
    jd, host, port, secret = submit(loom, "oldest")
    s = authenticate(host, port, secret)
    reg = {"task": "worker:0", "attempt": 0, "host": "127.0.0.1", "port": 40000, "pid": 1}
    s.sendall(frame(REGISTER, json.dumps(reg).encode()))
    got = read_frame(s)
    s.close()
    assert got is not None and got[0] == ABORT, got
    reason = json.loads(got[1])["reason"]
    assert "(protocol none)" in reason and f"loom {VERSION} (protocol {PROTOCOL})" in reason, reason
    loom.wait_for(lambda: loom.state(jd)["state"] == "failed", what="the job failed")
    coordinator_exits(loom)


def test_an_agent_refuses_a_coordinator_of_another_protocol(loom, tmp_path):
    secret = os.urandom(16).hex()
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(30)
    port = srv.getsockname()[1]
    env = dict(loom.env, LOOM_COORD=f"127.0.0.1:{port}", LOOM_SECRET=secret,
               LOOM_TASK="worker:0", LOOM_ATTEMPT="0", LOOM_TLS="off")
    agent = subprocess.Popen([LOOM, "agent"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        c, _ = srv.accept()
        c.settimeout(30)
        nonce = os.urandom(32)
        c.sendall(frame(1, blob=nonce))  # CHALLENGE
        t, _, blob = read_frame(c)
        assert t == 2 and blob[:32] == hmac.new(secret.encode(), b"loom-c" + nonce,
                                                hashlib.sha256).digest()
        c.sendall(frame(3, blob=hmac.new(secret.encode(), b"loom-s" + blob[32:],
                                         hashlib.sha256).digest()))  # AUTH_OK
        t, js, _ = read_frame(c)
        assert t == REGISTER, t
        reg = json.loads(js)
        assert reg["protocol"] == PROTOCOL and reg["version"] == VERSION, reg
        assign = {"workdir": str(tmp_path / "w"), "job_id": "j", "job_dir": str(tmp_path),
                  "role": "worker", "index": 0, "argv": ["true"], "procs": 1, "env": {},
                  "files": {}, "cpus": "", "gpus": "", "memory": 0, "training": False,
                  "rank_base": -1, "world_size": 0, "heartbeat_timeout_ms": 10000,
                  "protocol": PROTOCOL + 1, "version": "9.9.9"}
        c.sendall(frame(ASSIGN, json.dumps(assign).encode()))
        t, js, _ = read_frame(c)
        assert t == FAIL, t
        reason = json.loads(js)["reason"]
        assert (f"this agent is loom {VERSION} (protocol {PROTOCOL}) and the coordinator loom "
                f"9.9.9 (protocol {PROTOCOL + 1})") in reason, reason
        c.close()
        out, err = agent.communicate(timeout=30)
        assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
        srv.close()
