"""Every connection to the coordinator authenticates first; bad bytes, or
none at all within the auth timeout, close that connection and leave the
job undisturbed."""
import hashlib
import hmac
import json
import os
import socket
import struct
import time

import pytest

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
    assert err.count("closed a connection that did not authenticate in time") == 1, err
    assert out.count("survived") == 2
    assert loom.state()["state"] == "succeeded"
