"""TLS on every link that leaves a host (wire_tls.h), across three network
namespaces (tests/system/netns.py): a capture on the bridge that joins the
hosts sees none of what the job sends (log lines, KV values, gradients over
the collectives and to the parameter server, the feed's split names, the
secret), and with LOOM_TLS=off the same capture sees all of it (so the
check can fail). A process on another host without the secret cannot join,
speak plain to the coordinator, or replay a recorded agent's connection."""
import json
import os
import re
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

import netns
from conftest import BUILD, LOOM
from test_hosts import start_agents, submit

pytestmark = [
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
    pytest.mark.skipif(not os.path.exists("/usr/bin/tcpdump"), reason="needs tcpdump"),
]

PROBE = BUILD / "tests/system/tlsprobe"


@pytest.fixture
def hosts():
    with netns.Hosts(3) as h:
        yield h


class Capture:
    """tcpdump on the hub's bridge: every packet between the hosts."""

    def __init__(self, hosts, path):
        self.path = path
        self.p = subprocess.Popen(["ip", "netns", "exec", hosts.hub, "tcpdump", "-i", "br0", "-U", "--immediate-mode",
                                   "-B", "65536", "-s", "0", "-w", str(path), "tcp"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # tcpdump says when it listens
        line = self.p.stderr.readline()
        assert "listening on" in line, line

    def stop(self):
        time.sleep(1.5)  # the last packets
        self.p.send_signal(signal.SIGINT)
        _, err = self.p.communicate(timeout=30)
        dropped = re.search(r"(\d+) packets? dropped by kernel", err)
        assert dropped and dropped[1] == "0", err
        return self.path.read_bytes()


def tcp_streams(pcap):
    """The TCP payloads of an Ethernet pcap, per (src, sport, dst, dport),
    in capture order: enough for the replay (no reordering on a bridge)."""
    magic = struct.unpack("<I", pcap[:4])[0]
    assert magic == 0xA1B2C3D4, hex(magic)
    out, off = {}, 24
    while off + 16 <= len(pcap):
        incl = struct.unpack("<IIII", pcap[off:off + 16])[2]
        pkt = pcap[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00":
            continue
        ip = pkt[14:]
        ihl = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        if ip[9] != 6:
            continue
        tcp = ip[ihl:total]
        doff = (tcp[12] >> 4) * 4
        key = (socket.inet_ntoa(ip[12:16]), struct.unpack(">H", tcp[0:2])[0],
               socket.inet_ntoa(ip[16:20]), struct.unpack(">H", tcp[2:4])[0])
        if tcp[doff:]:
            out.setdefault(key, bytearray()).extend(tcp[doff:])
    return out


JOB = """
name: {name}
backend: external
env: {{LOOM_TLS: "{tls}"}}
roles:
  ps: {{command: [{loom}, ps]}}
  worker: {{instances: 3, command: [{probe}, {mark}, ps, feed, slow]}}
feed: {{input: [data/*.txt], format: lines, output: out/}}
"""


@pytest.mark.parametrize("tls", ["auto", "off"])
def test_the_link_carries_nothing_in_clear(loom, hosts, tmp_path, tls):
    mark = "LMK" + secrets.token_hex(6)
    data = tmp_path / "data"
    data.mkdir()
    (data / f"{mark}-part.txt").write_text("".join(f"r{i:04d}\n" for i in range(1200)))
    spec = loom.spec(JOB.format(name=f"tls{tls}", tls=tls, loom=LOOM, probe=PROBE, mark=mark))
    cap = Capture(hosts, tmp_path / "link.pcap")
    jd, env = submit(loom, hosts, spec, {"LOOM_TLS": tls, "LOOM_FEED_SPLIT_BYTES": "600"})
    env["LOOM_TLS"] = tls
    placed = {"ps:0": 1, "worker:0": 0, "worker:1": 1, "worker:2": 2}
    agents = start_agents(hosts, env, placed)
    for task, (rc, err) in agents.items():
        assert rc == 0, f"{task}: {err}"
    loom.wait_for(lambda: loom.state(jd)["state"] == "succeeded", what="the job succeeded")
    pcap = cap.stop()
    log = (jd / "logs/all.log").read_text()
    assert len(re.findall(r"TLSOK rank=\d", log)) == 3, log
    recs = [int(n) for n in re.findall(r"FEEDRECS rank=\d (\d+)", log)]
    # 1 ms a record: every worker (host) gets splits
    assert sum(recs) == 1200 and len(recs) == 3 and min(recs) > 0, log
    streams = tcp_streams(pcap)
    coord_port = int(json.loads((jd / "coord.json").read_text())["addr"].rsplit(":", 1)[1])
    # the capture saw the job: every agent's link to the coordinator on h0
    # and worker traffic to the ps shard on h1
    to_coord = {k for k in streams if k[2] == hosts.addrs[0] and k[3] == coord_port}
    assert {k[0] for k in to_coord} >= {hosts.addrs[1], hosts.addrs[2]}, streams.keys()
    seen = b"".join(bytes(v) for v in streams.values())
    assert len(seen) > 64 * 1024, len(seen)
    kinds = {"log line": f"{mark}-log-", "KV value": f"{mark}-kv-",
             "gradient (collectives)": f"{mark}-grad-", "gradient (ps)": f"{mark}-push-",
             "feed split": f"{mark}-part"}
    found = {what for what, m in kinds.items() if m.encode() in seen}
    secret = (jd / "secret").read_text().strip().encode()
    assert secret not in seen  # never sent, TLS or not: the handshakes prove it
    if tls == "off":
        assert found == set(kinds), f"the plain run should show every kind: {found}"
    else:
        assert not found, f"in clear on the link: {found}"
        # what crossed is TLS: records of type 22 (handshake) then 23 (data)
        for k in to_coord:
            assert streams[k][:3] == b"\x16\x03\x01", (k, bytes(streams[k][:8]))


# Sends a file's bytes to host:port from another namespace, then reads
# until the server closes; prints what came back.
SEND = r"""
import socket, sys
host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=10)
s.sendall(open(path, "rb").read())
s.settimeout(10)
got = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
except OSError as e:
    print("ERR", e)
print("GOT", len(got), got[:3].hex())
"""


def test_a_host_without_the_secret_cannot_join_speak_plain_or_replay(loom, hosts, tmp_path):
    spec = loom.spec(f"""
name: tlsguard
backend: external
roles:
  worker: {{instances: 2, command: "sleep 600"}}
""")
    cap = Capture(hosts, tmp_path / "start.pcap")
    jd, env = submit(loom, hosts, spec)
    coord_host, coord_port = env["LOOM_COORD"].rsplit(":", 1)
    procs = {}
    for task, i in {"worker:0": 0, "worker:1": 1}.items():
        procs[task] = subprocess.Popen(hosts.exec_args(i, LOOM, "agent"),
                                       env=dict(env, LOOM_TASK=task), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    try:
        loom.wait_for(lambda: loom.state(jd)["state"] == "running", what="the job running")
        streams = tcp_streams(cap.stop())
        agent = [k for k in streams if k[0] == hosts.addrs[1] and k[2] == coord_host
                 and k[3] == int(coord_port)]
        assert len(agent) == 1, streams.keys()
        recorded = tmp_path / "agent-stream.bin"
        recorded.write_bytes(bytes(streams[agent[0]]))
        assert recorded.read_bytes()[:1] == b"\x16"  # a TLS handshake record

        def on_h2(code, *args):
            return subprocess.run(hosts.exec_args(2, sys.executable, "-c", code, *args),
                                  capture_output=True, text=True, timeout=60)

        # 1. replay the agent's recorded bytes: the coordinator's fresh
        # handshake does not accept them, and nothing is registered
        r = on_h2(SEND, coord_host, coord_port, recorded)
        assert r.returncode == 0, r.stderr
        # 2. speak plain (a frame, no TLS): refused
        plain = tmp_path / "plain-frame.bin"
        plain.write_bytes(b"\x00\x00\x00\x48\x00\x02\x00\x00\x00\x00\x00\x00" + b"A" * 64)
        p = on_h2(SEND, coord_host, coord_port, plain)
        assert p.returncode == 0, p.stderr
        # 3. join with another secret: the TLS handshake fails, and says so
        k = subprocess.run(hosts.exec_args(2, BUILD / "tests/system/kvprobe"),
                           env=dict(env, LOOM_SECRET="not-the-secret", LOOM_TASK="worker:1",
                                    LOOM_RANK="1", LOOM_WORLD_SIZE="2", LOOM_ROLE="worker"),
                           capture_output=True, text=True, timeout=60)
        assert k.returncode != 0
        assert "do not hold the same job secret" in k.stderr, k.stderr
        coord_log = (jd / "coordinator.log").read_text()
        assert "does not speak TLS" in coord_log, coord_log  # the plain frame
        assert "a replayed or altered connection" in coord_log, coord_log
        assert "do not hold the same job secret" in coord_log, coord_log
        regs = [e for e in loom.events(jd) if e["event"] == "registered"]
        assert sorted(e["task"] for e in regs) == ["worker:0", "worker:1"], regs
        assert loom.state(jd)["state"] == "running"
    finally:
        loom.run("kill", jd.name, timeout=60)
        for p in procs.values():
            try:
                p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
    loom.wait_for(lambda: loom.state(jd)["state"] in ("killed", "failed"), what="the job ended")
