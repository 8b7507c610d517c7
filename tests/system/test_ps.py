"""The parameter server (`loom ps`, loom/ps.h) through real jobs and real
processes, checked the way a user would check it:

1. SYNC training over 2 shards and 3 workers ends with the parameters
   PyTorch's optimizers (SGD, Adagrad, Adam / SparseAdam) reach from the
   same start on the same summed gradients, dense and sparse.
2. The CTR example learns, asynchronous and synchronous: its training loss
   falls and its held-out log-loss beats always predicting the average.
3. A job whose ps is SIGKILLed mid-training is retried and resumes from the
   last checkpoint, ending with exactly the parameters of an uninterrupted
   run.
4. A worker whose ps dies learns it within 2 s (LOOM_ECONN), no hang.
5. A standalone `loom ps` closes unauthenticated, malformed, oversized and
   silent connections, answers bad requests with errors, serves a correct
   client on, and exits 0 on SIGTERM.

The unit tests (tests/unit/ps_*_test.c) cover the rest in one process:
sharding over 1..4 shards, duplicates, staleness bounds, checkpoint
round trips across shard counts, damaged files.
"""
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BUILD, LOOM

PROBE = BUILD / "tests/system/psprobe"
CTR = BUILD / "examples/ctr/ctr"


def need(*paths):
    for p in paths:
        if not p.exists():
            pytest.skip(f"{p} is not built")


def ps_pids(loom, index=None):
    """Pids of this test's `loom ps` processes (shard `index` if given)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd[:2] != [str(LOOM).encode(), b"ps"] and cmd[1:2] != [b"ps"]:
            continue
        if f"LOOM_HOME={loom.home}".encode() not in env:
            continue
        if index is not None and f"LOOM_TASK=ps:{index}".encode() not in env:
            continue
        out.append(int(p.name))
    return out


# ---- 1. sync training against PyTorch --------------------------------------
DN, SK, SD = 1000, 40, 3


def test_sync_training_matches_pytorch(loom, tmp_path):
    torch = pytest.importorskip("torch")
    need(PROBE)
    out = tmp_path / "ref.json"
    spec = loom.spec(f"""
name: pssync
roles:
  ps: {{instances: 2, command: [{LOOM}, ps]}}
  chief: {{command: [{PROBE}, sync-ref, {out}]}}
  worker: {{instances: 2, command: [{PROBE}, sync-ref, {out}]}}
""")
    r = loom.run("run", spec, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    world, steps = d["world"], d["steps"]
    assert world == 3 and d["shards"] == 2
    torch.manual_seed(0)

    def optimizer(name, params, sparse):
        if name == "sgd":
            return torch.optim.SGD(params, lr=0.05)
        if name == "adagrad":
            return torch.optim.Adagrad(params, lr=0.1, initial_accumulator_value=0.1, eps=1e-10)
        return (torch.optim.SparseAdam if sparse else torch.optim.Adam)(params, lr=0.02)

    idx = torch.arange(DN, dtype=torch.float64)
    for name in ("sgd", "adagrad", "adam"):
        # dense: worker r's gradient is w - target_r, summed over workers
        p = torch.nn.Parameter(torch.tensor(d[name]["dense0"], dtype=torch.float32))
        opt = optimizer(name, [p], False)
        for s in range(steps):
            g = torch.zeros(DN, dtype=torch.float32)
            for r in range(world):
                g += p.data - torch.sin(0.01 * idx * (r + 1) + 0.1 * s).float()
            p.grad = g
            opt.step()
        got = torch.tensor(d[name]["dense"])
        assert torch.allclose(got, p.data, rtol=1e-4, atol=1e-5), \
            f"{name} dense: max diff {(got - p.data).abs().max().item()}"
        # sparse: rank r's keys at step s, key 0 everyone's (and some twice)
        e = torch.nn.Parameter(torch.tensor(d[name]["rows0"], dtype=torch.float32).view(SK, SD))
        opt = optimizer(name, [e], True)
        for s in range(steps):
            rows, vals = [], []
            for r in range(world):
                for k in list(range((r + s) % world, SK, world)) + [0]:
                    rows.append(k)
                    vals.append(e.data[k] * 0.5 - 0.1 * (r + 1))
            e.grad = torch.sparse_coo_tensor(torch.tensor([rows]), torch.stack(vals), (SK, SD))
            opt.step()
        got = torch.tensor(d[name]["rows"]).view(SK, SD)
        assert torch.allclose(got, e.data, rtol=1e-4, atol=1e-5), \
            f"{name} sparse: max diff {(got - e.data).abs().max().item()}"


# ---- 2. the CTR example ------------------------------------------------------
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_ctr_example_learns(loom, mode):
    need(CTR)
    args = f"[{CTR}, --mode, {mode}, --steps, '150', --eval, '10000', --log-every, '30']"
    spec = loom.spec(f"""
name: ctr-{mode}
roles:
  ps: {{instances: 2, command: [{LOOM}, ps]}}
  chief: {{command: {args}}}
  worker: {{instances: 2, command: {args}}}
""")
    r = loom.run("run", spec, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"RESULT (\{.*\})", r.stdout)
    assert m, r.stdout
    res = json.loads(m[1])
    assert res["mode"] == mode and res["world"] == 3
    assert res["rows"] > 100000  # a real embedding table, spread over both shards
    if mode == "sync":  # step 0 reads the initial values: nothing learnt, log 2
        assert abs(res["start_loss"] - 0.6931) < 0.005, res
    assert res["last_loss"] < res["first_loss"] < res["start_loss"]
    assert res["eval_loss"] < res["baseline"] - 0.03, res
    assert res["auc"] > 0.65, res


# ---- 3. a killed ps: the retried job resumes from the checkpoint ------------
def ckpt_spec(loom, name, out, sleep_ms, retries):
    return loom.spec(f"""
name: {name}
retries: {retries}
roles:
  ps: {{instances: 2, command: [{LOOM}, ps]}}
  chief: {{command: [{PROBE}, ckpt, {out}, '30', '5', '{sleep_ms}']}}
  worker: {{command: [{PROBE}, ckpt, {out}, '30', '5', '{sleep_ms}']}}
""", name=f"{name}.yaml")


def test_killed_ps_job_resumes_from_checkpoint(loom, tmp_path):
    need(PROBE)
    ref_out, out = tmp_path / "ref.json", tmp_path / "resumed.json"
    r = loom.run("run", ckpt_spec(loom, "psref", ref_out, 0, 0), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = json.loads(ref_out.read_text())

    p = loom.popen("run", ckpt_spec(loom, "pskill", out, 40, 1))
    jd = loom.wait_for(lambda: [j for j in loom.jobs() if "pskill" in j.name], what="job")[0]
    latest = jd / "ps-ckpt" / "LATEST"
    loom.wait_for(lambda: latest.exists() and int(latest.read_text()) >= 10, timeout=60,
                  what="a checkpoint of step 10")
    pids = ps_pids(loom, 0)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stdout + stderr
    state = loom.state(jd)
    assert state.get("attempt", 0) == 1 or "attempt 1" in stderr, stderr
    m = re.findall(r"RESTORED rank=(\d) attempt=1 step=(\d+)", stdout)
    assert len(m) == 2 and all(int(s) >= 10 for _, s in m), stdout
    assert "FRESH rank=0 attempt=0" in stdout
    got = json.loads(out.read_text())
    for k in ("dense", "rows"):  # two workers: every sum is exact
        assert got[k] == ref[k], f"{k} differs from the uninterrupted run"


# ---- 4. a dead ps fails its workers fast --------------------------------------
def test_dead_ps_fails_the_worker_within_2s(loom):
    need(PROBE)
    spec = loom.spec(f"""
name: psdie
roles:
  ps: {{command: [{LOOM}, ps]}}
  chief: {{command: [{PROBE}, die]}}
""")
    p = loom.popen("run", spec)
    jd = loom.wait_for(lambda: loom.jobs() and loom.job_dir(), what="job")
    log = jd / "logs" / "chief-0.log"
    loom.wait_for(lambda: log.exists() and "PULLING" in log.read_text(), timeout=60,
                  what="the worker pulling")
    time.sleep(0.2)
    pids = ps_pids(loom)
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    t_kill = time.monotonic()
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 1  # the ps failed: so did the job
    m = re.search(r"PSFAIL rc=(\w+) t=([\d.]+) msg=(.*)", stdout)
    assert m, stdout
    assert m[1] in ("LOOM_ECONN", "LOOM_EABORTED"), m[0]
    assert float(m[2]) - t_kill < 2.0, m[0]


# ---- 5. a standalone ps and bad peers ----------------------------------------
HDR = struct.Struct("<IHHIiIiQQQ")  # 48 bytes
SECRET = "ps-test-secret"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return None
        b += c
    return b


def closed(s, timeout=3):
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def authed(port, secret=SECRET):
    s = socket.create_connection(("127.0.0.1", port))
    ch = recv_exact(s, 40)
    assert ch[:8] == b"LOOMPS01"
    mac = hmac.new(secret.encode(), b"loom-ps-c" + ch[8:], hashlib.sha256).digest()
    cn = os.urandom(32)
    s.sendall(b"LOOMPS01" + mac + cn)
    try:
        ok = recv_exact(s, 32)
    except ConnectionResetError:
        ok = None
    if ok is None:
        return s, False
    assert ok == hmac.new(secret.encode(), b"loom-ps-s" + cn, hashlib.sha256).digest()
    return s, True


def request(s, op, rid, var=0, count=0, rank=0, step=0, off=0, flags=0, payload=b""):
    s.sendall(HDR.pack(len(payload), op, flags, var, 0, count, rank, rid, step, off) + payload)
    h = HDR.unpack(recv_exact(s, 48))
    body = recv_exact(s, h[0]) if h[0] else b""
    return {"op": h[1], "var": h[3], "rc": h[4], "id": h[7], "body": body}


def declaration(kind, dim, name, opt=0, lr=1.0):
    return (struct.pack("<IIQQ", kind, 1, dim, dim) + struct.pack("<IffQ", 0, 0, 0, 0)
            + struct.pack("<Ifffff", opt, lr, 0, 0, 0, 0) + struct.pack("<I", len(name))
            + name.encode())


def test_standalone_ps_refuses_bad_peers_and_serves_on(loom):
    port = free_port()
    env = dict(loom.env, LOOM_CLUSTER=json.dumps({"ps": [f"127.0.0.1:{port}"]}), LOOM_INDEX="0",
               LOOM_SECRET=SECRET, LOOM_WORLD_SIZE="1", LOOM_AUTH_TIMEOUT="500")
    p = subprocess.Popen([str(LOOM), "ps"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        end = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                assert time.time() < end, "loom ps did not listen"
                time.sleep(0.05)
        # the wrong secret: closed after the answer
        s, ok = authed(port, "wrong")
        assert not ok
        # bytes that are not the handshake: closed
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\n" * 8)
        assert closed(s)
        # silence: closed after LOOM_AUTH_TIMEOUT
        s = socket.create_connection(("127.0.0.1", port))
        t0 = time.time()
        assert closed(s, timeout=5) and time.time() - t0 < 3
        # an oversized length after authenticating: closed at once
        s, ok = authed(port)
        assert ok
        s.sendall(HDR.pack(0x7FFFFFFF, 4, 0, 0, 0, 0, 0, 1, 0, 0))
        assert closed(s)
        # a request before CONFIG, an unknown op: closed
        for op in (12, 77):
            s, _ = authed(port)
            s.sendall(HDR.pack(0, op, 0, 0, 0, 0, 0, 1, 0, 0))
            assert closed(s)
        # a well-behaved client: bad requests get errors, good ones answers
        s, _ = authed(port)
        r = request(s, 1, 1, rank=0, off=1)  # CONFIG: async, 1 worker
        assert r["rc"] == 0 and r["id"] == 1
        r = request(s, 3, 2, var=99, count=4)  # PULL of no variable
        assert r["rc"] == -1 and b"no dense variable" in r["body"]
        r = request(s, 2, 3, payload=b"\x01" * 30)  # DECLARE of garbage
        assert r["rc"] == -1
        r = request(s, 2, 4, payload=declaration(2, 2, "emb"))  # sparse, SGD lr 1
        assert r["rc"] == 0
        var = r["var"]
        keys = struct.pack("<2Q", 7, 1 << 63)
        r = request(s, 6, 5, var=var, count=2, flags=1,
                    payload=keys + struct.pack("<4f", 1, 2, 3, 4))  # SPUSH
        assert r["rc"] == 0, r
        r = request(s, 5, 6, var=var, count=2, payload=keys)  # SPULL
        assert r["rc"] == 0 and struct.unpack("<4f", r["body"]) == (-1, -2, -3, -4)
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    assert rc == 0, p.stderr.read()
    err = p.stderr.read()
    assert "serving on port" in err and "authentication failed" in err


def test_loom_ps_outside_a_job_says_what_to_do(loom):
    env = dict(loom.env)
    for k in ("LOOM_CLUSTER", "LOOM_SECRET"):
        env.pop(k, None)
    r = subprocess.run([str(LOOM), "ps"], env=env, capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "LOOM_CLUSTER" in r.stderr and "ps role" in r.stderr


# ---- 6. floods: idle connections, failed handshakes ---------------------------
def raise_nofile(want):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def start_ps(loom, port, stderr, **extra):
    env = dict(loom.env, LOOM_CLUSTER=json.dumps({"ps": [f"127.0.0.1:{port}"]}), LOOM_INDEX="0",
               LOOM_SECRET=SECRET, LOOM_WORLD_SIZE="1", **extra)
    p = subprocess.Popen([str(LOOM), "ps"], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    end = time.time() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return p
        except OSError:
            assert time.time() < end, "loom ps did not listen"
            time.sleep(0.05)


def stop_ps(p):
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise


def worker_round(port, i, timeout=5):
    """A worker's handshake, CONFIG, DECLARE, sparse push and pull on a
    fresh connection; returns the seconds it took."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.settimeout(timeout)
        ch = recv_exact(s, 40)
        assert ch and ch[:8] == b"LOOMPS01", f"try {i}: no challenge ({ch!r})"
        mac = hmac.new(SECRET.encode(), b"loom-ps-c" + ch[8:], hashlib.sha256).digest()
        cn = os.urandom(32)
        s.sendall(b"LOOMPS01" + mac + cn)
        ok = recv_exact(s, 32)
        assert ok == hmac.new(SECRET.encode(), b"loom-ps-s" + cn, hashlib.sha256).digest(), \
            f"try {i}: handshake refused"
        r = request(s, 1, 1, rank=0, off=1)  # CONFIG: async, 1 worker
        assert r["rc"] == 0
        r = request(s, 2, 2, payload=declaration(2, 2, f"emb{i}"))  # sparse, SGD lr 1
        assert r["rc"] == 0
        var = r["var"]
        keys = struct.pack("<2Q", 3 + i, 11 * i)
        r = request(s, 6, 3, var=var, count=2, flags=1,
                    payload=keys + struct.pack("<4f", i, 2, 3, 4))  # SPUSH
        assert r["rc"] == 0, r
        r = request(s, 5, 4, var=var, count=2, payload=keys)  # SPULL
        assert r["rc"] == 0 and struct.unpack("<4f", r["body"]) == (-i, -2, -3, -4)
    finally:
        s.close()
    return time.monotonic() - t0


def test_ps_serves_workers_while_5000_idle_connections_are_held(loom, tmp_path):
    """Idle connections, however many, cannot keep a worker out: those that
    have not authenticated get LOOM_PREAUTH_MAX places, the oldest evicted."""
    assert raise_nofile(12000) >= 5400
    port = free_port()
    with open(tmp_path / "ps.err", "w") as err:
        p = start_ps(loom, port, err)
    idle = []
    try:
        for _ in range(5000):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        took = [worker_round(port, i) for i in range(7)]
        # more idle connections between workers: still every worker gets in
        for _ in range(500):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        took += [worker_round(port, 7 + i) for i in range(3)]
        assert max(took) < 3, took
        assert p.poll() is None
    finally:
        for s in idle:
            s.close()
        rc = stop_ps(p)
    assert rc == 0
    log = (tmp_path / "ps.err").read_text()
    assert len(log.splitlines()) < 40, log[-3000:]
    assert re.search(r"\d+ more refused connections from 127\.0\.0\.1 in the last 10 s", log), log


def test_ps_flood_of_failed_handshakes_logs_counts(loom, tmp_path):
    """A flood of wrong-secret handshakes writes a few lines and a count, not
    a line each."""
    port = free_port()
    with open(tmp_path / "ps.err", "w") as err:
        p = start_ps(loom, port, err)
    n = 0
    try:
        end = time.time() + 3
        while time.time() < end:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            ch = recv_exact(s, 40)
            s.sendall(b"LOOMPS01" + b"\0" * 64)
            assert closed(s)
            s.close()
            n += 1
        assert n > 200, n
        worker_round(port, 0)  # and a worker still gets in
    finally:
        rc = stop_ps(p)
    assert rc == 0
    lines = (tmp_path / "ps.err").read_text().splitlines()
    refusals = [l for l in lines if "authentication failed" in l]
    counts = [int(m[1]) for l in lines
              if (m := re.search(r"(\d+) more refused connections from 127\.0\.0\.1 "
                                 r"in the last 10 s", l))]
    assert len(lines) < 20, lines
    assert counts, lines
    # every refusal is either a line or counted
    assert len(refusals) + sum(counts) == n, (n, len(refusals), counts)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def shard_threads(err_path):
    m = re.search(r"serving on port \d+ \([^)]*\), (\d+) threads?", Path(err_path).read_text())
    assert m, Path(err_path).read_text()
    return int(m.group(1))


def test_ps_threads_apply_repeated_keys_in_order(loom, tmp_path):
    """A shard splits a large sparse push and pull over its threads
    (LOOM_PS_THREADS): with 1 and 3 threads, pushes of 3000 keys drawn
    from 500 (a raw client does not merge repeats: each is its own update,
    in the message's order) leave exactly the float32 values of applying
    them one by one, and a pull of 2000 keys reads them back."""
    lr, rounds = 0.0371, 3
    pushes = []
    for r in range(rounds):
        keys = [((i * 2654435761 + r * 40503) >> 7) % 500 for i in range(3000)]
        grads = [((i * 2654435761 + r * 97) % 1000003) / 77777.0 - 6.43 for i in range(3000 * 4)]
        pushes.append((keys, grads))
    want = {}
    for keys, grads in pushes:
        for i, k in enumerate(keys):
            row = want.setdefault(k, [0.0] * 4)
            for j in range(4):
                row[j] = f32(row[j] - f32(f32(lr) * f32(grads[4 * i + j])))
    pull = [(i * 13) % 500 for i in range(2000)]
    for threads in (1, 3):
        port = free_port()
        err = tmp_path / f"ps-{threads}.err"
        with open(err, "w") as ef:
            p = start_ps(loom, port, ef, LOOM_PS_THREADS=str(threads))
        try:
            s, ok = authed(port)
            assert ok
            assert request(s, 1, 1, rank=0, off=1)["rc"] == 0  # CONFIG: async
            r = request(s, 2, 2, payload=declaration(2, 4, "emb", lr=lr))
            assert r["rc"] == 0, r
            var = r["var"]
            for n, (keys, grads) in enumerate(pushes):
                body = struct.pack(f"<{len(keys)}Q", *keys) + struct.pack(f"<{len(grads)}f", *grads)
                r = request(s, 6, 3 + n, var=var, count=len(keys), flags=1, payload=body)
                assert r["rc"] == 0, r
            r = request(s, 5, 9, var=var, count=len(pull),
                        payload=struct.pack(f"<{len(pull)}Q", *pull))
            assert r["rc"] == 0, r
            got = struct.unpack(f"<{len(pull) * 4}f", r["body"])
            for i, k in enumerate(pull):
                assert list(got[4 * i:4 * i + 4]) == want[k], (threads, k)
            s.close()
        finally:
            assert stop_ps(p) == 0
        assert shard_threads(err) == threads


def test_ps_threads_default_shares_the_hosts_cores(loom, tmp_path):
    """LOOM_PS_THREADS=0 (the default): the host's cores over the ps tasks
    LOOM_CLUSTER puts on this host, at most 4, at least 1."""
    cpus = len(os.sched_getaffinity(0))
    for others, on_host in (([], 1), (["127.0.0.1:1"], 2), (["10.255.255.1:1"], 1)):
        port = free_port()
        err = tmp_path / f"ps-{len(others)}-{on_host}.err"
        env = dict(loom.env, LOOM_INDEX="0", LOOM_SECRET=SECRET, LOOM_WORLD_SIZE="1",
                   LOOM_CLUSTER=json.dumps({"ps": [f"127.0.0.1:{port}"] + others}))
        env.pop("LOOM_PS_THREADS", None)
        with open(err, "w") as ef:
            p = subprocess.Popen([str(LOOM), "ps"], env=env, stdout=subprocess.DEVNULL, stderr=ef)
        try:
            end = time.time() + 10
            while "serving on port" not in err.read_text():
                assert p.poll() is None and time.time() < end, err.read_text()
                time.sleep(0.05)
        finally:
            assert stop_ps(p) == 0
        assert shard_threads(err) == max(1, min(4, cpus // on_host)), (others, err.read_text())


def test_ps_binds_the_tasks_address(loom):
    """The shard listens on its task's address, not on every interface,
    unless LOOM_PS_BIND asks."""
    port = free_port()
    p = start_ps(loom, port, subprocess.DEVNULL)
    try:
        listening = Path("/proc/net/tcp").read_text()
        addr = f"0100007F:{port:04X}"  # 127.0.0.1
        assert f" {addr} 00000000:0000 0A " in listening, "not on 127.0.0.1 alone"
    finally:
        assert stop_ps(p) == 0
    port = free_port()
    p = start_ps(loom, port, subprocess.DEVNULL, LOOM_PS_BIND="0.0.0.0")
    try:
        assert f" 00000000:{port:04X} 00000000:0000 0A " in Path("/proc/net/tcp").read_text()
    finally:
        assert stop_ps(p) == 0
