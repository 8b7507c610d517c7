"""The dashboard over HTTPS (LOOM_DASHBOARD_CERT), as a browser or a
script meets it, with Python's ssl module: a self-signed certificate whose
printed SHA-256 fingerprint is that of the certificate the server presents
(and that verifies for 127.0.0.1 once trusted), the API with its token and
401 without, the Secure cookie, https:// in the console, state.json and
`loom status`; a user's certificate (made here with `openssl req`) that
verifies against itself as CA for its IP address and name, over TLS 1.3
and 1.2, under `loom ui`; a plain HTTP request and a silent connection
closed unanswered; and bad settings failing `loom run`, `loom submit` and
`loom ui` with exit status 2 before anything starts."""
import hashlib
import json
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from test_dashboard import raw

FP = re.compile(r"(?:[0-9A-F]{2}:){31}[0-9A-F]{2}")


def fingerprint(der):
    return ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())


def presented_der(host, port):
    """The DER of the certificate the server presents (nothing verified)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=host) as t:
            return t.getpeercert(binary_form=True)


def trusting(pem=None, cafile=None, tls12=False):
    """A client context that trusts only the given certificate."""
    ctx = ssl.create_default_context(cadata=pem, cafile=cafile)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def get(url, ctx, headers=None):
    """(status, headers, body) of a GET over HTTPS, errors included."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def plain_answer(host, port, data):
    """What a plain (not TLS) client gets back before the server closes."""
    return raw(f"http://{host}:{port}", data, read_timeout=10)


def lines_until(stream, pattern, limit=50):
    """Reads lines until one matches pattern; returns its match."""
    seen = []
    for _ in range(limit):
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} in {seen}")


def make_pair(tmp, name, san="IP:127.0.0.1,DNS:localhost"):
    crt, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName={san}", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True)
    return crt, key


def wait_spec(loom, tmp, name):
    """A job whose one worker runs until the file `stop` exists."""
    stop = tmp / f"{name}.stop"
    return loom.spec(f"""
name: {name}
roles:
  worker: {{command: [sh, -c, "while [ ! -e {stop} ]; do sleep 0.1; done"]}}
""", name=f"{name}.yaml"), stop


def test_self_signed_job_dashboard(loom, tmp_path):
    spec, stop = wait_spec(loom, tmp_path, "https")
    p = loom.popen("run", spec, env={"LOOM_DASHBOARD_CERT": "self-signed"})
    try:
        url = lines_until(p.stderr, r"loom: dashboard (https://\S+)").group(1)
        fp = lines_until(p.stderr, r"loom: dashboard certificate SHA-256 fingerprint (\S+)$").group(1)
        assert FP.fullmatch(fp), fp
        m = re.fullmatch(r"https://(127\.0\.0\.1):(\d+)/\?token=([0-9a-f]{32})", url)
        assert m, url
        host, port, token = m.group(1), int(m.group(2)), m.group(3)
        base = f"https://{host}:{port}"

        # the certificate presented is the one whose fingerprint was printed
        der = presented_der(host, port)
        assert fingerprint(der) == fp
        pem = ssl.get_server_certificate((host, port))
        assert fingerprint(ssl.PEM_cert_to_DER_cert(pem)) == fp
        # state.json says the same
        jd = loom.wait_for(lambda: loom.jobs() and loom.jobs()[-1], what="the job directory")
        state = loom.wait_for(lambda: (s := loom.state(jd)).get("dashboard") and s,
                              what="the dashboard in state.json")
        assert state["dashboard"] == url and state["dashboard_fingerprint"] == fp

        # a plain HTTP request gets no HTTP answer; a silent connection is
        # closed at the pre-authentication deadline (LOOM_AUTH_TIMEOUT, 5 s);
        # both logged (first: at most 5 refusals are logged in 10 s)
        ans = plain_answer(host, port, f"GET /api/job?token={token} HTTP/1.1\r\n"
                                       f"Host: {host}\r\n\r\n".encode())
        assert not ans.startswith(b"HTTP"), ans[:100]
        t0 = time.time()
        with socket.create_connection((host, port), timeout=20) as s:
            assert s.recv(100) == b""
        assert 3 < time.time() - t0 < 15

        # trusted (once its fingerprint is checked), it verifies for the
        # address in the URL, strict checks included
        ctx = trusting(pem=pem)
        ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        st, _, body = get(f"{base}/api/job?token={token}", ctx)
        assert st == 200 and json.loads(body)["name"] == "https", (st, body[:200])
        st, _, _ = get(f"{base}/api/job", ctx)
        assert st == 401
        st, _, _ = get(f"{base}/api/job?token={'0' * 32}", ctx)
        assert st == 403
        st, _, body = get(f"{base}/api/tasks", ctx, {"Authorization": f"Bearer {token}"})
        assert st == 200, body[:200]
        # the page sets a cookie for HTTPS only
        st, hdr, _ = get(f"{base}/?token={token}", ctx)
        assert st == 200
        cookie = hdr["Set-Cookie"]
        assert f"loom_{port}={token}" in cookie and "; Secure" in cookie, cookie
        # not for another name
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection((host, port), timeout=10) as s:
                trusting(pem=pem).wrap_socket(s, server_hostname="example.com")

        # loom status
        r = loom.run("status", jd.name)
        assert r.returncode == 0, r.stderr
        assert f"web      {url}\n" in r.stdout
        assert f"cert     SHA-256 {fp} (self-signed)\n" in r.stdout
    finally:
        stop.touch()
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "dashboard: closed the connection from 127.0.0.1: TLS: a plain HTTP request" in err
    assert "no request in time" in err
    ev = [e for e in loom.events(jd) if e.get("event") == "dashboard"]
    assert ev and ev[0]["url"] == url and ev[0]["fingerprint"] == fp, ev


def start_ui(loom, env):
    p = loom.popen("ui", env=env)
    m = lines_until(p.stdout, r"loom: dashboard (https://127\.0\.0\.1:(\d+))/\?token=([0-9a-f]{32})$")
    return p, m.group(1), int(m.group(2)), m.group(3)


def stop_ui(p):
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=10)
    assert p.returncode == 0, err
    return out, err


def test_users_certificate_under_loom_ui(loom, tmp_path):
    crt, key = make_pair(tmp_path, "dash")
    p, base, port, token = start_ui(loom, {"LOOM_DASHBOARD_CERT": str(crt),
                                           "LOOM_DASHBOARD_KEY": str(key)})
    try:
        want = fingerprint(ssl.PEM_cert_to_DER_cert(crt.read_text()))
        assert fingerprint(presented_der("127.0.0.1", port)) == want
        for name in ("127.0.0.1", "localhost"):
            for tls12 in (False, True):
                ctx = trusting(cafile=str(crt), tls12=tls12)
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    with ctx.wrap_socket(s, server_hostname=name) as t:
                        assert t.version() == ("TLSv1.2" if tls12 else "TLSv1.3")
                        t.sendall(f"GET /api/jobs?token={token} HTTP/1.1\r\nHost: {name}\r\n"
                                  f"\r\n".encode())
                        ans = b""
                        while (b := t.recv(65536)):
                            ans += b  # ends with close_notify: no EOF error
                assert ans.startswith(b"HTTP/1.1 200 "), ans[:200]
        st, _, _ = get(f"{base}/api/jobs", trusting(cafile=str(crt)))
        assert st == 401
        # another name, or trusting another certificate: refused
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                trusting(cafile=str(crt)).wrap_socket(s, server_hostname="example.com")
        other, _ = make_pair(tmp_path, "other")
        with pytest.raises(ssl.SSLCertVerificationError):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                trusting(cafile=str(other)).wrap_socket(s, server_hostname="127.0.0.1")
        ans = plain_answer("127.0.0.1", port, b"GET / HTTP/1.0\r\n\r\n")
        assert not ans.startswith(b"HTTP"), ans[:100]
    finally:
        out, err = stop_ui(p)
    assert "fingerprint" not in out  # printed for a self-signed one only

    # self-signed under loom ui: the fingerprint printed is the one presented
    p, base, port, token = start_ui(loom, {"LOOM_DASHBOARD_CERT": "self-signed"})
    try:
        fp = lines_until(p.stdout, r"fingerprint (\S+)$").group(1)
        assert fingerprint(presented_der("127.0.0.1", port)) == fp
        pem = ssl.get_server_certificate(("127.0.0.1", port))
        st, _, body = get(f"{base}/api/jobs?token={token}", trusting(pem=pem))
        assert st == 200, body[:200]
    finally:
        stop_ui(p)


def test_bad_settings_fail_before_anything_starts(loom, tmp_path):
    a_crt, a_key = make_pair(tmp_path, "a")
    _, b_key = make_pair(tmp_path, "b")
    spec, _ = wait_spec(loom, tmp_path, "bad")
    missing = tmp_path / "nope" / "dash.pem"
    cases = [
        ({"LOOM_DASHBOARD_CERT": str(missing)},
         f"LOOM_DASHBOARD_CERT={missing}: cannot read: No such file or directory"),
        ({"LOOM_DASHBOARD_CERT": str(a_crt), "LOOM_DASHBOARD_KEY": str(b_key)},
         f"LOOM_DASHBOARD_KEY={b_key}: the key does not match the certificate in "
         f"LOOM_DASHBOARD_CERT={a_crt} ("),
        ({"LOOM_DASHBOARD_CERT": str(a_crt)},
         f"LOOM_DASHBOARD_CERT={a_crt}: holds no PEM private key: set LOOM_DASHBOARD_KEY"),
        ({"LOOM_DASHBOARD_CERT": str(a_key), "LOOM_DASHBOARD_KEY": str(a_key)},
         f"LOOM_DASHBOARD_CERT={a_key}: not a PEM certificate ("),
        ({"LOOM_DASHBOARD_KEY": str(a_key)},
         f"LOOM_DASHBOARD_KEY={a_key} is set but LOOM_DASHBOARD_CERT is not"),
        ({"LOOM_DASHBOARD_CERT": "self-signed", "LOOM_DASHBOARD_KEY": str(a_key)},
         "with LOOM_DASHBOARD_CERT=self-signed loom makes its own key"),
    ]
    key_text = a_key.read_text()
    for env, says in cases:
        for verb in ("run", "submit", "ui"):
            args = (verb,) if verb == "ui" else (verb, spec)
            r = loom.run(*args, env=env, timeout=30)
            assert r.returncode == 2, (verb, env, r.returncode, r.stderr)
            assert says in r.stderr, (verb, says, r.stderr)
            assert "PRIVATE KEY" not in r.stderr and key_text[40:80] not in r.stderr
            assert r.stdout == ""
    assert loom.jobs() == []  # no job was made
