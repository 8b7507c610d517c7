"""The web dashboard: the coordinator's JSON API, Prometheus text, token
checks and a strict HTTP parser (over raw sockets), `loom ui` over finished
jobs, and the page itself in a real headless Chromium that shows a running
job's tasks and a chart gaining points."""
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import LIBLOOM, pylib_env

HERE = Path(__file__).resolve().parent
METRICS = HERE / "dashboard" / "metrics.py"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def task_env():
    """Environment for tasks that load libloom by ctypes (under ASan, with
    the ASan runtime preloaded: conftest.pylib_env())."""
    return {"LOOM_LIB": str(LIBLOOM), **pylib_env()}


def metrics_spec(loom, name, steps, every, instances=2, extra_roles=""):
    env = ", ".join(f'{k}: "{v}"' for k, v in task_env().items())
    return loom.spec(f"""
name: {name}
env: {{{env}}}
roles:
  worker: {{instances: {instances}, command: [/usr/bin/python3, "{METRICS}", "{steps}", "{every}"]}}
{extra_roles}""", name=f"{name}.yaml")


def dashboard_of(loom, job_dir, timeout=20):
    def url():
        try:
            return json.loads((job_dir / "state.json").read_text()).get("dashboard")
        except (OSError, ValueError):
            return None
    u = loom.wait_for(url, timeout=timeout, what="the dashboard URL in state.json")
    base, token = u.split("/?token=")
    assert re.fullmatch(r"[0-9a-f]{32}", token), u
    return base, token


def start_job(loom, spec):
    p = loom.popen("run", spec)
    jd = loom.wait_for(lambda: loom.jobs() and loom.jobs()[-1], what="the job directory")
    return p, jd


def get(url, headers=None):
    """(status, headers, body bytes) of a GET, errors included."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def api(base, path, token):
    sep = "&" if "?" in path else "?"
    st, _, body = get(f"{base}/{path}{sep}token={token}")
    assert st == 200, (path, st, body[:300])
    return json.loads(body)


def raw(base, data, read_timeout=5):
    """Sends data as is and returns the whole answer (the server closes)."""
    host, port = base.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=read_timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except (ConnectionResetError, socket.timeout):
            pass
    return out


def status_of(answer):
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    assert m, answer[:200]
    return int(m.group(1))


PROM_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? '
    r'(?P<value>-?[0-9.eE+-]+|NaN|[+-]Inf)$')


def parse_prometheus(text):
    """{family: [(labels dict, value)]}; asserts the text format 0.0.4."""
    types, samples = {}, {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("gauge", "counter", "untyped", "summary", "histogram"), line
            assert name not in types, f"TYPE twice: {line}"
            types[name] = kind
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP "), line
            continue
        m = PROM_SAMPLE.match(line)
        assert m, f"not a Prometheus sample: {line!r}"
        name = m.group("name")
        assert name in types, f"sample before its # TYPE: {line}"
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group("labels") or ""))
        samples.setdefault(name, []).append((labels, float(m.group("value"))))
    return types, samples


def loss_points(m, task):
    s = [x for x in m["series"] if x["tag"] == "loss" and x["task"] == task]
    return s[0]["points"] if s else []


# ---------------------------------------------------------------------------
def test_api_prometheus_token_and_strict_http(loom):
    spec = metrics_spec(loom, "dash", steps=60, every=0.15)
    p, jd = start_job(loom, spec)
    try:
        base, token = dashboard_of(loom, jd)
        idle = socket.create_connection(tuple([base.split("//")[1].split(":")[0],
                                               int(base.rsplit(":", 1)[1])]), timeout=20)
        idle.sendall(b"GET / HTTP/1.1\r\n")  # never finished: the server must drop it
        t_idle = time.time()

        # The API: job, tasks, metrics that grow, events, logs.
        loom.wait_for(lambda: all(len(loss_points(api(base, "api/metrics", token), t)) >= 3
                                  for t in ("worker:0", "worker:1")), timeout=30,
                      what="three loss points per task")
        job = api(base, "api/job", token)
        assert job["id"] == jd.name and job["state"] == "running" and job["ntasks"] == 2
        assert job["roles"]["worker"]["instances"] == 2 and "env" not in job["roles"]["worker"]
        assert "loss" in job["metric_tags"]
        tasks = api(base, "api/tasks", token)
        assert [t["task"] for t in tasks["tasks"]] == ["worker:0", "worker:1"]
        assert all(t["state"] == "running" and t["attempt"] == 0 for t in tasks["tasks"])
        assert all("loss" in t["latest"] for t in tasks["tasks"])

        m1 = api(base, "api/metrics", token)
        n1 = len(loss_points(m1, "worker:0"))
        for task, scale in (("worker:0", 1.0), ("worker:1", 1.5)):
            for step, value, t, attempt in loss_points(m1, task):
                assert value == scale / (step + 1) and attempt == 0 and t > 1e9
        steps = [pt[0] for pt in loss_points(m1, "worker:0")]
        assert steps == list(range(len(steps))), steps
        time.sleep(1.0)
        m2 = api(base, "api/metrics", token)
        assert len(loss_points(m2, "worker:0")) > n1, "metrics do not grow"
        one = api(base, "api/metrics?tag=loss&task=worker:1&n=2", token)
        assert [(s["task"], s["tag"], len(s["points"])) for s in one["series"]] == [("worker:1", "loss", 2)]
        assert one["series"][0]["source"] == "user"

        ev = api(base, "api/events?n=1000", token)["events"]
        kinds = [e["event"] for e in ev]
        assert "job_started" in kinds and "started" in kinds and "metric" not in kinds
        assert [e["event"] for e in api(base, "api/events?task=worker:0&event=started", token)["events"]] == ["started"]
        assert len(api(base, "api/events?n=2", token)["events"]) == 2

        logs = api(base, "api/logs?task=worker:0&n=3", token)
        assert len(logs["lines"]) == 3 and all(l.startswith("step ") for l in logs["lines"])
        assert any(l.startswith("[worker:1] step") for l in api(base, "api/logs?n=20", token)["lines"])

        # Prometheus text format.
        st, hdr, body = get(f"{base}/metrics?token={token}")
        assert st == 200 and hdr["Content-Type"].startswith("text/plain; version=0.0.4")
        types, samples = parse_prometheus(body.decode())
        assert types["loom_metric"] == "gauge" and types["loom_task_restarts_total"] == "counter"
        loss = {l["task"]: v for l, v in samples["loom_metric"] if l["tag"] == "loss"}
        assert set(loss) == {"worker:0", "worker:1"} and all(0 < v <= 1.5 for v in loss.values())
        states = {l["task"]: l["state"] for l, v in samples["loom_task_state"]}
        assert states == {"worker:0": "running", "worker:1": "running"}
        assert samples["loom_job_state"] == [({"job": jd.name, "state": "running"}, 1.0)]

        # The token: none is 401, a wrong one 403, on every path; a bearer
        # header and the page's cookie work; the page sets that cookie.
        for path in ("", "api/job", "api/tasks", "api/metrics", "api/events", "api/logs", "metrics",
                     "nonexistent"):
            assert get(f"{base}/{path}")[0] == 401, path
            assert get(f"{base}/{path}?token={'0' * 32}")[0] == 403, path
            assert get(f"{base}/{path}?token={token[:-1]}")[0] == 403, path
            assert get(f"{base}/{path}?token={token}x")[0] == 403, path
        assert get(f"{base}/api/job", {"Authorization": f"Bearer {token}"})[0] == 200
        assert get(f"{base}/api/job", {"Authorization": "Bearer " + "f" * 32})[0] == 403
        port = base.rsplit(":", 1)[1]
        assert get(f"{base}/api/job", {"Cookie": f"other=1; loom_{port}={token}"})[0] == 200
        assert get(f"{base}/api/job", {"Cookie": f"loom_{port}={'a' * 32}"})[0] == 403
        st, hdr, body = get(f"{base}/?token={token}")
        assert st == 200 and hdr["Content-Type"].startswith("text/html")
        assert f"loom_{port}={token}" in hdr["Set-Cookie"] and "HttpOnly" in hdr["Set-Cookie"]
        assert "script-src 'sha256-" in hdr["Content-Security-Policy"]
        assert b"<svg" not in body and b"api/tasks" in body  # charts are drawn by the page's script
        assert get(f"{base}/etc/passwd?token={token}")[0] == 404

        # Untrusted input over raw sockets: traversal, absolute forms, bad
        # methods, versions, sizes and framing.
        h = f"Host: x\r\nAuthorization: Bearer {token}\r\n".encode()
        cases = [
            (b"GET /../state.json HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /api/../../secret HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /%2e%2e/secret HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /api%2f..%2fsecret HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET //etc/passwd HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET http://127.0.0.1/etc/passwd HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /job/..%5c..%5csecret/ HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /api/logs?task=../../secret:0 HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /api/logs?task=%2e%2e:0 HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GET /api/logs?task=worker:99 HTTP/1.1\r\n" + h + b"\r\n", 404),
            (b"GET /api/metrics?n=-1 HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"POST /api/job HTTP/1.1\r\n" + h + b"Content-Length: 0\r\n\r\n", 405),
            (b"DELETE / HTTP/1.1\r\n" + h + b"\r\n", 405),
            (b"GET / HTTP/1.1\r\n" + h + b"Content-Length: 5\r\n\r\nhello", 413),
            (b"GET / HTTP/1.1\r\n" + h + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 413),
            (b"GET / HTTP/2.0\r\n" + h + b"\r\n", 505),
            (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n" + h + b" folded\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\n" + h + b"Bad Name: x\r\n\r\n", 400),
            (b"GET /\x01 HTTP/1.1\r\n" + h + b"\r\n", 400),
            (b"GARBAGE\r\n\r\n", 400),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n" + h + b"\r\n", 414),
            (b"GET / HTTP/1.1\r\n" + h + b"X-Big: " + b"b" * 17000 + b"\r\n\r\n", 431),
            (b"GET / HTTP/1.1\r\n" + h + b"".join(b"X-%d: 1\r\n" % i for i in range(80)) + b"\r\n", 431),
            (b"GET /api/job HTTP/1.0\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n", 200),
            (b"HEAD /api/job HTTP/1.1\r\n" + h + b"\r\n", 200),
        ]
        for req, want in cases:
            ans = raw(base, req)
            assert status_of(ans) == want, (req[:80], ans[:200])
            assert b"Connection: close\r\n" in ans
        head = raw(base, b"HEAD /api/job HTTP/1.1\r\n" + h + b"\r\n")
        assert head.endswith(b"\r\n\r\n") and b"Content-Length: " in head  # no body
        ans = raw(base, b"POST / HTTP/1.1\r\n" + h + b"\r\n")
        assert b"Allow: GET, HEAD\r\n" in ans
        # A torrent of garbage and many connections at once leave it serving.
        socks = [socket.create_connection(("127.0.0.1", int(port))) for _ in range(40)]
        for s in socks:
            s.sendall(os.urandom(512))
        for s in socks:
            s.close()
        assert api(base, "api/job", token)["id"] == jd.name

        # The half-sent request is dropped after LOOM_AUTH_TIMEOUT (5 s):
        # it never showed a token.
        idle.settimeout(max(1.0, 11 - (time.time() - t_idle)))
        try:
            got = idle.recv(4096)
        except ConnectionResetError:
            got = b""
        assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:100]
        assert time.time() - t_idle >= 4.5
        idle.close()

        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert f"loom: dashboard {base}/?token={token}" in err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=20)


def raise_nofile(want):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_dashboard_serves_its_token_while_5000_idle_connections_are_held(loom):
    """Connections that have not shown the token get LOOM_PREAUTH_MAX
    places, the oldest evicted: 5,000 idle ones do not keep the user out,
    and a flood of wrong tokens writes a few lines and a count."""
    assert raise_nofile(12000) >= 5400
    spec = metrics_spec(loom, "dashflood", steps=400, every=0.1, instances=1)
    p, jd = start_job(loom, spec)
    idle = []
    try:
        base, token = dashboard_of(loom, jd)
        port = int(base.rsplit(":", 1)[1])
        for _ in range(5000):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for i in range(6):
            t0 = time.monotonic()
            st, _, body = get(f"{base}/api/job?token={token}")
            assert st == 200 and json.loads(body)["id"] == jd.name, (i, st, body[:200])
            assert time.monotonic() - t0 < 3, (i, time.monotonic() - t0)
            for _ in range(100):  # and more idle ones in between
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for s in idle:
            s.close()
        idle = []

        # wrong tokens, as fast as they come: few lines in coordinator.log
        n, end = 0, time.time() + 3
        while time.time() < end:
            assert status_of(raw(base, b"GET /api/job?token=" + b"0" * 32 +
                                 b" HTTP/1.1\r\nHost: x\r\n\r\n")) == 403
            n += 1
        assert n > 100, n
        assert api(base, "api/job", token)["id"] == jd.name
        os.killpg(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        for s in idle:
            s.close()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=20)
    # the coordinator's log (its stderr under `loom run`, coordinator.log
    # when detached)
    log = err.splitlines()
    ours = [l for l in log if "dashboard:" in l or "refused connections" in l]
    assert len(ours) < 40, ours[-40:]
    counts = [int(m[1]) for l in ours
              if (m := re.search(r"(\d+) more refused connections from 127\.0\.0\.1 "
                                 r"in the last 10 s", l))]
    assert counts, ours
    # each eviction and each wrong token is a line or counted
    assert len(ours) - len(counts) + sum(counts) >= 5000 - 64 + n, (n, ours)


def start_ui(loom, *args):
    p = loom.popen("ui", *args)
    line = p.stdout.readline()
    m = re.match(r"loom: dashboard (http://127\.0\.0\.1:\d+)/\?token=([0-9a-f]{32})$", line.strip())
    assert m, (line, p.poll())
    return p, m.group(1), m.group(2)


def stop_ui(p):
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    p.stdout.close()
    p.stderr.close()


def test_loom_ui_serves_finished_jobs(loom):
    ok = metrics_spec(loom, "good", steps=12, every=0.02)
    r = loom.run("run", ok, timeout=60)
    assert r.returncode == 0, r.stderr
    bad = loom.spec("name: bad\nroles:\n  worker: {command: 'echo going down; exit 3'}\n", name="bad.yaml")
    r = loom.run("run", bad, timeout=60)
    assert r.returncode == 1, r.stderr
    jobs = {d.name.split("-")[0]: d for d in loom.jobs()}
    good_dir, bad_dir = jobs["good"], jobs["bad"]
    good_token = json.loads((good_dir / "state.json").read_text())["dashboard"].split("token=")[1]

    p, base, token = start_ui(loom)
    try:
        tf = loom.home / "ui-token"
        assert tf.read_text().strip() == token
        assert stat.S_IMODE(tf.stat().st_mode) == 0o600

        st, hdr, body = get(f"{base}/?token={token}")
        assert st == 200 and b"loom jobs" in body and hdr["Content-Type"].startswith("text/html")
        listed = {j["id"]: j for j in api(base, "api/jobs", token)["jobs"]}
        assert listed[good_dir.name]["state"] == "succeeded"
        assert listed[bad_dir.name]["state"] == "failed" and listed[bad_dir.name]["exit_status"] == 1
        assert list(listed)[0] == bad_dir.name  # newest first

        g = f"job/{good_dir.name}"
        assert api(base, f"{g}/api/job", token)["state"] == "succeeded"
        tasks = api(base, f"{g}/api/tasks", token)["tasks"]
        assert [(t["task"], t["state"], t["exit_code"]) for t in tasks] == \
            [("worker:0", "succeeded", 0), ("worker:1", "succeeded", 0)]
        # every metric event in events.jsonl, and nothing else
        want = {}
        for line in (good_dir / "events.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e["event"] == "metric":
                want.setdefault((e["task"], e["tag"]), []).append([e["step"], e["value"]])
        got = {(s["task"], s["tag"]): [p[:2] for p in s["points"]]
               for s in api(base, f"{g}/api/metrics", token)["series"]}
        assert got == want and len(got[("worker:0", "loss")]) == 12
        _, samples = parse_prometheus(get(f"{base}/{g}/metrics?token={token}")[2].decode())
        assert {l["task"]: v for l, v in samples["loom_task_exit_code"]} == {"worker:0": 0, "worker:1": 0}
        assert api(base, f"{g}/api/logs?task=worker:1&n=1", token)["lines"] == ["step 11 loss 0.1250"]
        b = f"job/{bad_dir.name}"
        bj = api(base, f"{b}/api/job", token)
        assert bj["state"] == "failed" and bj["root_cause"]["task"] == "worker:0"
        assert api(base, f"{b}/api/logs?task=worker:0", token)["lines"][-1] == "going down"
        assert [e["event"] for e in api(base, f"{b}/api/events?event=failed", token)["events"]] == ["failed"]
        st, _, body = get(f"{base}/{g}/?token={token}")
        assert st == 200 and b"api/metrics" in body

        # /job/<id> redirects to /job/<id>/ with the query kept
        ans = raw(base, f"GET /{g}?token={token} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status_of(ans) == 301 and f"Location: /{g}/?token={token}\r\n".encode() in ans

        # Access: the ui token opens everything; a job's own token opens only
        # that job; nothing else opens anything.
        for path in ("", "api/jobs", f"{g}/", f"{g}/api/tasks", f"{b}/metrics", "job/nope/"):
            assert get(f"{base}/{path}")[0] == 401, path
            assert get(f"{base}/{path}?token={'1' * 32}")[0] == 403, path
        assert get(f"{base}/{g}/api/tasks?token={good_token}")[0] == 200
        assert get(f"{base}/{b}/api/tasks?token={good_token}")[0] == 403
        assert get(f"{base}/api/jobs?token={good_token}")[0] == 403
        assert get(f"{base}/?token={good_token}")[0] == 403
        assert get(f"{base}/job/nope-20260101-000000-0000/?token={token}")[0] == 404
        assert get(f"{base}/job/nope-20260101-000000-0000/?token={good_token}")[0] == 403
        h = f"Host: x\r\nAuthorization: Bearer {token}\r\n".encode()
        for target in (b"/job/../../etc/", b"/job/%2e%2e/secret", b"/job/" + good_dir.name.encode() + b"/../secret",
                       b"//job/x/", b"/job/%2fetc/api/job", b"/job/x%00/"):
            assert status_of(raw(base, b"GET " + target + b" HTTP/1.1\r\n" + h + b"\r\n")) == 400, target
        for target in (b"/job/.hidden/", b"/job/-x/api/job", b"/job/a.b/", b"/job/" + b"x" * 300 + b"/"):
            assert status_of(raw(base, b"GET " + target + b" HTTP/1.1\r\n" + h + b"\r\n")) == 404, target
    finally:
        stop_ui(p)

    # The token stays across runs; JOB arguments limit what is served.
    p, base2, token2 = start_ui(loom, good_dir.name[:8])
    try:
        assert token2 == token
        assert [j["id"] for j in api(base2, "api/jobs", token)["jobs"]] == [good_dir.name]
        assert get(f"{base2}/job/{bad_dir.name}/api/job?token={token}")[0] == 404
        assert api(base2, f"job/{good_dir.name}/api/job", token)["id"] == good_dir.name
    finally:
        stop_ui(p)
    r = loom.run("ui", "no-such-job")
    assert r.returncode == 2 and "no job 'no-such-job'" in r.stderr
    os.chmod(loom.home / "ui-token", 0o644)
    r = loom.run("ui")
    assert r.returncode == 3 and "chmod 600" in r.stderr


def test_ui_on_large_and_hostile_job_directories(loom, tmp_path):
    """Caps and incremental reading, on a job directory written by hand: a
    long events.jsonl (series keep their last 2000 points, other events
    their last 1000), lines that are not JSON or too long, a line still
    being written, logs with bytes that are not UTF-8, and symlinks that
    would lead out of the job directory."""
    jd = loom.home / "jobs" / "synth-20260101-000000-abcd"
    (jd / "logs").mkdir(parents=True)
    (jd / "spec.yaml").write_text(json.dumps({"name": "synth", "roles": {"worker": {"instances": 2, "command": "x", "env": {"KEY": "hush"}}}}))
    (jd / "state.json").write_text(json.dumps({
        "job": jd.name, "name": "synth", "state": "running", "attempt": 0,
        "tasks": [{"task": "worker:0", "role": "worker", "index": 0, "state": "running"},
                  {"task": "worker:1", "role": "worker", "index": 1, "state": "running"}]}))
    ev = []
    for i in range(5000):
        ev.append(json.dumps({"t": 1.0 + i, "job": jd.name, "task": "worker:0", "attempt": 0, "event": "metric",
                              "tag": "loss", "step": i, "value": i / 10, "source": "user"}))
    for i in range(1500):
        ev.append(json.dumps({"t": 1.0 + i, "job": jd.name, "task": "worker:1", "attempt": 0, "event": "note", "i": i}))
    ev.append("this is not json")
    ev.append(json.dumps({"event": "huge", "pad": "x" * 100000}))
    ev.append(json.dumps({"event": "big", "task": "worker:1", "pad": "y" * 5000}))
    ev.append(json.dumps({"t": 2.0, "task": "worker:1", "attempt": 0, "event": "metric", "tag": 'a"b\\c\nd',
                          "step": 1, "value": 2.5, "source": "user"}))
    partial = json.dumps({"t": 3.0, "task": "worker:1", "attempt": 0, "event": "metric", "tag": "late",
                          "step": 7, "value": 7.0, "source": "user"})
    (jd / "events.jsonl").write_text("\n".join(ev) + "\n" + partial[:20])
    log = b"".join(b"line %d\n" % i for i in range(5000)) + b"bad \xff\xfe utf8 \x01 ctl \xe2\x82\xac ok\n"
    (jd / "logs" / "worker-0.log").write_bytes(log)
    (jd / "logs" / "worker-1.log").symlink_to("/etc/passwd")
    os.symlink(jd, loom.home / "jobs" / "link-20260101-000000-abcd")

    p, base, token = start_ui(loom)
    try:
        g = f"job/{jd.name}"
        m = api(base, f"{g}/api/metrics?tag=loss", token)
        pts = m["series"][0]["points"]
        assert len(pts) == 2000 and pts[0][0] == 3000 and pts[-1] == [4999, 499.9, 5000.0, 0]
        assert m["series"][0]["total"] == 5000
        thin = api(base, f"{g}/api/metrics?tag=loss&max=100", token)["series"][0]["points"]
        assert len(thin) == 100 and thin[-1][0] == 4999
        assert len(api(base, f"{g}/api/metrics?tag=loss&n=10", token)["series"][0]["points"]) == 10
        assert "late" not in [s["tag"] for s in api(base, f"{g}/api/metrics", token)["series"]]
        with open(jd / "events.jsonl", "a") as f:  # the line is finished
            f.write(partial[20:] + "\n")
        late = api(base, f"{g}/api/metrics?tag=late", token)["series"]
        assert [(s["task"], s["points"][0][:2]) for s in late] == [("worker:1", [7, 7])]

        e = api(base, f"{g}/api/events?n=1000", token)
        assert e["total"] == 1501 and len(e["events"]) == 1000
        assert e["events"][-1]["event"] == "big" and e["events"][-1]["abridged"] is True
        assert "pad" not in e["events"][-1]
        assert [x["i"] for x in e["events"][:-1]] == list(range(501, 1500))
        assert get(f"{base}/{g}/api/events?n=1001&token={token}")[0] == 400

        job = api(base, f"{g}/api/job", token)
        assert job["roles"]["worker"] == {"instances": 2, "command": "x"} and "hush" not in json.dumps(job)

        lines = api(base, f"{g}/api/logs?task=worker:0&n=1000", token)["lines"]
        assert len(lines) == 1000 and lines[0] == "line 4001"
        assert lines[-1] == "bad \ufffd\ufffd utf8 \x01 ctl \u20ac ok"
        assert api(base, f"{g}/api/logs?task=worker:1", token)["lines"] == []  # a symlink: not followed
        assert get(f"{base}/{g}/api/logs?task=worker:0&n=1001&token={token}")[0] == 400
        assert get(f"{base}/job/link-20260101-000000-abcd/api/job?token={token}")[0] == 404

        _, samples = parse_prometheus(get(f"{base}/{g}/metrics?token={token}")[2].decode())
        odd = [l for l, v in samples["loom_metric"] if l["task"] == "worker:1" and l["tag"] != "late"]
        assert odd == [{"job": jd.name, "task": "worker:1", "tag": 'a\\"b\\\\c\\nd', "source": "user"}]
        assert samples["loom_events_total"][0][1] == 6505  # lines read, the bad ones included
    finally:
        stop_ui(p)


def chromium(tmp, url, *args, timeout=60):
    """Runs headless Chromium on url; returns its stdout. Nothing it starts
    outlives the call."""
    prof = tmp / "chromium-profile"
    prof.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(prof),
           "XDG_CONFIG_HOME": str(prof / "config"), "XDG_CACHE_HOME": str(prof / "cache")}
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-extensions", "--mute-audio", f"--user-data-dir={prof}",
           "--window-size=1200,1300", *args, url]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode(errors="replace")


def chart_points(dom, tag):
    m = re.search(r'<svg[^>]*data-tag="%s"[^>]*data-points="(\d+)"' % re.escape(tag), dom)
    return int(m.group(1)) if m else 0


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs "
                                             "Debian's chromium)")
def test_page_in_headless_chromium(loom, tmp_path):
    spec = metrics_spec(loom, "browse", steps=70, every=0.15)
    p, jd = start_job(loom, spec)
    try:
        base, token = dashboard_of(loom, jd)
        url = f"{base}/?token={token}"
        loom.wait_for(lambda: len(loss_points(api(base, "api/metrics", token), "worker:1")) >= 3,
                      timeout=30, what="a few loss points")
        dom1 = chromium(tmp_path, url, "--virtual-time-budget=2500", "--dump-dom")
        # The tasks, their states, and a chart with circles and a line per task.
        for t in ("worker:0", "worker:1"):
            assert f'<tr data-task="{t}">' in dom1, dom1[:3000]
        assert dom1.count('class="badge s-running"') >= 2
        n1 = chart_points(dom1, "loss")
        assert n1 >= 4, dom1[:3000]
        chart = re.search(r'<svg[^>]*data-tag="loss".*?</svg>', dom1, re.S).group(0)
        assert chart.count("<circle") >= 4 and chart.count("<polyline") >= 2
        assert 'data-task="worker:0"' in chart and 'data-task="worker:1"' in chart
        assert "step " in dom1  # log lines
        assert "rendezvous_done" in dom1  # events
        time.sleep(2.0)
        dom2 = chromium(tmp_path, url, "--virtual-time-budget=2500", "--dump-dom")
        n2 = chart_points(dom2, "loss")
        assert n2 > n1, f"the chart did not gain points: {n1} then {n2}"

        shot = tmp_path / "dashboard.png"
        chromium(tmp_path, url, "--virtual-time-budget=2500", f"--screenshot={shot}")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000
        print(f"\ndashboard screenshot: {shot} (chart points {n1} -> {n2})")

        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=20)

    # The same page for the finished job, from `loom ui`, and its index.
    u, ubase, utoken = start_ui(loom)
    try:
        dom = chromium(tmp_path, f"{ubase}/?token={utoken}", "--virtual-time-budget=2000", "--dump-dom")
        assert f'<tr data-job="{jd.name}">' in dom and 's-succeeded' in dom
        dom = chromium(tmp_path, f"{ubase}/job/{jd.name}/?token={utoken}", "--virtual-time-budget=2000",
                       "--dump-dom")
        assert chart_points(dom, "loss") == 140 and dom.count('class="badge s-succeeded"') >= 3
        shot = tmp_path / "ui-job.png"
        chromium(tmp_path, f"{ubase}/job/{jd.name}/?token={utoken}", "--virtual-time-budget=2000",
                 f"--screenshot={shot}")
        print(f"loom ui screenshot: {shot}")
    finally:
        stop_ui(u)


def test_a_series_is_whole_and_in_order_at_every_length(loom):
    """A (task, tag) series grows its ring from 64 points to 2000: at every
    length, across each growth and past the cap, the dashboard serves
    exactly the last min(n, 2000) points in order (a growth once wrote the
    next point over the oldest and served unwritten slots: garbage on the
    charts of any series of 65 to 2000 points)."""
    jd = loom.home / "jobs" / "grow-20260101-000000-abcd"
    (jd / "logs").mkdir(parents=True)
    (jd / "spec.yaml").write_text(json.dumps({"name": "grow", "roles": {"worker": {"command": "x"}}}))
    (jd / "state.json").write_text(json.dumps({
        "job": jd.name, "name": "grow", "state": "running", "attempt": 0,
        "tasks": [{"task": "worker:0", "role": "worker", "index": 0, "state": "running"}]}))
    lengths = [1, 63, 64, 65, 127, 128, 129, 200, 257, 1024, 1999, 2000, 2001, 4100]
    ev = [json.dumps({"t": 1.0 + i, "task": "worker:0", "attempt": 0, "event": "metric",
                      "tag": f"s{n}", "step": i, "value": i * 0.5, "source": "user"})
          for n in lengths for i in range(n)]
    (jd / "events.jsonl").write_text("\n".join(ev) + "\n")
    p, base, token = start_ui(loom)
    try:
        for n in lengths:
            s = api(base, f"job/{jd.name}/api/metrics?tag=s{n}", token)["series"]
            pts = s[0]["points"]
            want = list(range(max(0, n - 2000), n))
            assert [q[0] for q in pts] == want, (n, pts[:3], pts[-3:])
            assert [q[1] for q in pts] == [i * 0.5 for i in want], n
            assert s[0]["total"] == n
    finally:
        stop_ui(p)
