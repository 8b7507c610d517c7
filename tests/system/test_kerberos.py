"""`loom fs` on a Kerberized HDFS: a private MIT KDC (tests/system/kdc.py,
realm LOOM.TEST on 127.0.0.1) and a NameNode and two DataNodes from the
Maven jars logged in from its keytabs (scripts/yarn-cluster.sh --hdfs-only
--kerberos, hadoop.security.authentication=kerberos,
hadoop.rpc.protection=privacy, block access tokens on), both started once
for this module and stopped at its end, with no JVM and no krb5kdc left;
the byte-for-byte case runs again on a Kerberized HDFS of each other
level (integrity, authentication) on the same KDC.

alice kinit's from her keytab into a private credentials cache; loom
authenticates to the NameNode with SASL GSSAPI (RFC 4752, src/hadoop/gss.c
over MIT's libgssapi_krb5) and wraps every RPC under privacy (the
NameNode offers no other layer: a connection that works is a sealed one).
Hadoop's Java client (FsShell, kinit'ed the same way) is the reference:
what loom writes, Java reads byte for byte and the other way round; loom's
listing is Java's; the NameNode's audit log says loom's calls were alice's,
by Kerberos. Without a ticket (no cache, an expired ticket, a user who
cannot get one) loom fails at once with an error that says Kerberos, the
ticket and kinit, exit 1 (a filesystem error: permission denied's
class)."""
import contextlib
import hashlib
import random
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import kdc as kdcmod
from clusters import (Hdfs, hadoop_available, hadoop_classpath, jvm_pids, start_secure_hdfs,
                      stop_hadoop)
from conftest import LOOM, SAN_REPORT, SANITIZED

pytestmark = [
    pytest.mark.skipif(not hadoop_available(),
                       reason="java and mvn are not installed (scripts/setup.sh)"),
    pytest.mark.skipif(kdcmod.available() is not None, reason=str(kdcmod.available())),
]

MiB = 1024 * 1024


def sha(b: bytes):
    return hashlib.sha256(b).hexdigest()


def blob(n: int, seed):
    return random.Random(f"{seed}-{n}").randbytes(n)


class Secure:
    def __init__(self, kdc, hdfs, d: Path):
        self.kdc = kdc
        self.hdfs = hdfs
        self.dir = d
        self.alice = d / "alice.ccache"  # alice's credentials cache

    def url(self, path):
        # localhost, the host of the NameNode's principal (nn/localhost)
        return f"hdfs://localhost:{self.hdfs.nn}{path}"

    def java(self, *args, ccache=None, check=True):
        """FsShell with this KDC's krb5.conf and the ticket cache ccache
        (alice's by default)."""
        e = self.kdc.env(ccache or self.alice, base={})
        e["JAVA_TOOL_OPTIONS"] = f"-Djava.security.krb5.conf={self.kdc.krb5_conf}"
        return self.hdfs.java(*args, env=e, check=check)


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    d = tmp_path_factory.mktemp("kerberos")
    kdc = kdcmod.Kdc(d / "kdc")
    hd = d / "hdfs"
    hd.mkdir()
    kdc.start()
    try:
        start_secure_hdfs(hd, kdc.dir)
        try:
            s = Secure(kdc, Hdfs(hd, hadoop_classpath()), d)
            r = kdc.kinit(f"alice@{kdc.realm}", kdc.keytabs / "alice.keytab", s.alice)
            assert r.returncode == 0, r.stderr
            with_alice_home(s)
            yield s
        finally:
            stop_hadoop(hd)  # asserts that no JVM of it is left
            assert not jvm_pids(hd)
    finally:
        pid = kdc.proc.pid if kdc.proc else None
        kdc.stop()
        if pid:
            assert not Path(f"/proc/{pid}").exists() or \
                b"krb5kdc" not in Path(f"/proc/{pid}/cmdline").read_bytes(), \
                f"krb5kdc {pid} outlived the module"


class Fs:
    """`loom fs` with the cluster's configuration and a credentials cache."""

    def __init__(self, loom, secure):
        self.loom = loom
        self.s = secure

    def __call__(self, *args, ccache="alice", conf=True, env=None, timeout=60):
        e = dict(self.loom.env, **(env or {}))
        e.pop("HADOOP_USER_NAME", None)
        e.pop("HADOOP_CONF_DIR", None)
        if conf:
            e["HADOOP_CONF_DIR"] = str(self.s.hdfs.conf if conf is True else conf)
        e = self.s.kdc.env(self.s.alice if ccache == "alice" else ccache, base=e)
        t0 = time.monotonic()
        r = subprocess.run([str(LOOM), "fs", *map(str, args)], env=e, capture_output=True,
                           timeout=timeout)
        r.seconds = time.monotonic() - t0
        r.err = r.stderr.decode(errors="replace")
        m = SAN_REPORT.search(r.err)
        if m:
            self.loom.san_reports.append((f"stderr of loom fs {' '.join(map(str, args))}",
                                          r.err[m.start():][:2000]))
        return r

    def ok(self, *args, **kw):
        r = self(*args, **kw)
        assert r.returncode == 0, (args, r.returncode, r.err)
        return r


@pytest.fixture
def fs(loom, secure):
    return Fs(loom, secure)


def audit(secure, cmd, src):
    """The NameNode's audit lines for cmd on src (or on src._COPYING_, where
    a put writes before its rename): who, and how authenticated."""
    log = (secure.hdfs.dir / "logs" / "nn.log").read_text(errors="replace")
    return [m[:3] for m in re.findall(
        rf"allowed=(\w+)\s+ugi=(\S+) \(auth:(\w+)\)\s.*?cmd={cmd}\s+src={re.escape(src)}"
        rf"(\._COPYING_)?\s", log)]


def ls_lines(text):
    """perm, repl, owner, group, size and the base name of each entry."""
    out = {}
    for l in text.splitlines():
        m = re.fullmatch(r"([-d][-rwxst]{9}\+?)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+"
                         r"\d{4}-\d\d-\d\d \d\d:\d\d\s+(.*)", l)
        if m:
            out[m[6].rsplit("/", 1)[-1]] = (m[1], m[2], m[3], m[4], int(m[5]))
    return out


def with_alice_home(s: Secure):
    """Makes /user/alice, alice's, as the NameNode's superuser (nn: its
    principal's short name)."""
    kdc = s.kdc
    nn = s.dir / "nn.ccache"
    r = kdc.kinit(f"nn/localhost@{kdc.realm}", kdc.keytabs / "nn.keytab", nn)
    assert r.returncode == 0, r.stderr
    s.java("-mkdir", "-p", "/user/alice", ccache=nn)
    s.java("-chown", "alice", "/user/alice", ccache=nn)


@contextlib.contextmanager
def other_hdfs(secure, d: Path, protection="privacy", data_protection=None, encrypt=None):
    """A Kerberized HDFS of its own in d on the module's KDC (alice's home
    made), stopped at the end with no JVM left."""
    start_secure_hdfs(d / "hdfs", secure.kdc.dir, protection=protection,
                      data_protection=data_protection, encrypt=encrypt)
    try:
        s = Secure(secure.kdc, Hdfs(d / "hdfs", hadoop_classpath()), secure.dir)
        s.dir = d  # its own nn ticket cache; alice's is the module's
        with_alice_home(s)
        yield s
    finally:
        stop_hadoop(d / "hdfs")
        assert not jvm_pids(d / "hdfs")


# A Kerberized HDFS of its own per case: its C paths (the GSSAPI integrity
# layer, the DataNodes' SASL handshake) run in the ASan pass, which checks
# them under the sanitizers; the normal pass keeps the module's cluster's
# cases (CI's two passes run at the same time: one cluster start fewer in
# each case of the longer one).
ASAN_ONLY = "a Kerberized HDFS of its own: runs in the ASan/UBSan pass"


@pytest.fixture(params=["privacy", "integrity", "authentication"])
def level(request, secure, tmp_path_factory):
    """(the protection level, its Secure cluster): privacy is the module's
    cluster; integrity and authentication (hadoop.rpc.protection) a
    Kerberized HDFS of their own on the same KDC, started for the case."""
    if request.param == "privacy":
        yield request.param, secure
        return
    if not SANITIZED:
        pytest.skip(ASAN_ONLY)
    with other_hdfs(secure, tmp_path_factory.mktemp(f"hdfs-{request.param}"),
                    protection=request.param) as s:
        yield request.param, s


def test_loom_and_java_agree_byte_for_byte(loom, level, tmp_path):
    """At each hadoop.rpc.protection (the NameNode offers only its own
    level: a connection that works is one at that level, which loom's
    debug log names too)."""
    protection, secure = level
    fs = Fs(loom, secure)
    base = "/user/alice/k"
    fs.ok("mkdir", secure.url(base))
    # loom puts (more than one packet, not a round size), Java reads
    mine = blob(3 * MiB + 12345, "loom")
    (tmp_path / "mine").write_bytes(mine)
    r = fs.ok("put", tmp_path / "mine", secure.url(f"{base}/loom.bin"))
    assert r.stdout == b"", r.err
    got = secure.java("-cat", f"{base}/loom.bin").stdout
    assert sha(got) == sha(mine), f"Java read {len(got)} bytes, not the {len(mine)} loom put"
    # Java puts, loom reads
    theirs = blob(1 * MiB + 7, "java")
    (tmp_path / "java.bin").write_bytes(theirs)
    secure.java("-put", tmp_path / "java.bin", f"{base}/java.bin")
    r = fs.ok("cat", secure.url(f"{base}/java.bin"))
    assert sha(r.stdout) == sha(theirs), f"loom read {len(r.stdout)} bytes, not Java's {len(theirs)}"
    # the listing: loom's is Java's, every file alice's
    java = ls_lines(secure.java("-ls", base).stdout.decode())
    loom_ls = ls_lines(fs.ok("ls", secure.url(base)).stdout.decode())
    assert sorted(java) == ["java.bin", "loom.bin"], java
    assert loom_ls == java, (loom_ls, java)
    assert {v[2] for v in java.values()} == {"alice"}, java
    assert java["loom.bin"][4] == len(mine) and java["java.bin"][4] == len(theirs), java
    # the security layer loom chose (its debug log) is the cluster's
    r = fs.ok("stat", secure.url(f"{base}/loom.bin"), env={"LOOM_LOG": "debug:hadoop"})
    layer = {"authentication": "none"}.get(protection, protection)
    assert re.search(rf"Kerberos: alice@{secure.kdc.realm} authenticated to "
                     rf"nn/localhost@\S+, security layer {layer}\b", r.err), r.err
    # the NameNode says the file loom made was alice's, by Kerberos
    assert ("true", f"alice@{secure.kdc.realm}", "KERBEROS") in audit(secure, "create",
                                                                        f"{base}/loom.bin")
    # rm: gone for Java too
    fs.ok("rm", secure.url(f"{base}/loom.bin"))
    assert sorted(ls_lines(secure.java("-ls", base).stdout.decode())) == ["java.bin"]
    fs.ok("rm", "-r", secure.url(base))
    r = secure.java("-test", "-e", base, check=False)
    assert r.returncode == 1, r.stderr.decode(errors="replace")[-2000:]


def test_without_the_clients_configuration(fs, secure):
    """No HADOOP_CONF_DIR: the NameNode refuses SIMPLE, loom goes on with
    Kerberos, the service principal from what the NameNode says it is."""
    r = fs.ok("mkdir", secure.url("/user/alice/noconf"), conf=False)
    r = fs.ok("stat", secure.url("/user/alice/noconf"), conf=False)
    assert '"owner": "alice"' in r.stdout.decode(), r.stdout
    fs.ok("rm", "-r", secure.url("/user/alice/noconf"), conf=False)


def conf_with(secure, d: Path, **props):
    """A copy of the cluster's client configuration with props set in
    hdfs-site.xml (core keys are read from either file)."""
    shutil.copytree(secure.hdfs.conf, d)
    site = d / "hdfs-site.xml"
    text = site.read_text()
    for k in props:  # a key the cluster's configuration has already: replaced
        text = re.sub(rf"<property>\s*<name>{re.escape(k)}</name>.*?</property>\s*", "", text,
                      flags=re.S)
    extra = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n"
                    for k, v in props.items())
    site.write_text(text.replace("</configuration>", extra + "</configuration>"))
    return d


def test_the_client_configuration_is_checked(fs, secure, tmp_path):
    """A NameNode that is not the principal the configuration names is not
    talked to; a protection level the configuration does not allow is not
    taken (this NameNode offers privacy only)."""
    url = secure.url("/user/alice")
    other = conf_with(secure, tmp_path / "other",
                      **{"dfs.namenode.kerberos.principal": f"nn/elsewhere@{secure.kdc.realm}"})
    r = fs("ls", url, conf=other)
    assert r.returncode == 1 and r.stdout == b"", (r.returncode, r.err)
    assert "nn/localhost" in r.err and f"nn/elsewhere@{secure.kdc.realm}" in r.err, r.err
    host = conf_with(secure, tmp_path / "host",
                     **{"dfs.namenode.kerberos.principal": f"nn/_HOST@{secure.kdc.realm}"})
    fs.ok("ls", url, conf=host)  # _HOST: the URL's host, localhost
    weak = conf_with(secure, tmp_path / "weak", **{"hadoop.rpc.protection": "integrity"})
    r = fs("ls", url, conf=weak)
    assert r.returncode == 1 and r.stdout == b"", (r.returncode, r.err)
    assert "no common protection" in r.err and "offers mask 4" in r.err, r.err


def no_ticket(r, url):
    assert r.returncode == 1, (r.returncode, r.err)
    assert r.stdout == b"", r.stdout[:200]
    assert "Kerberos" in r.err and "no valid ticket" in r.err and "kinit" in r.err, r.err
    assert f"localhost:{url.split(':')[2].split('/')[0]}" in r.err, r.err  # names the NameNode
    assert "Exception" not in r.err, r.err  # not the NameNode's Java words
    assert r.seconds < 5, f"{r.seconds:.1f}s to say there is no ticket"


def test_no_ticket_is_a_clear_error_at_once(fs, secure, tmp_path):
    url = secure.url("/user/alice")
    # no credentials cache at all, with and without the configuration
    none = tmp_path / "none.ccache"
    no_ticket(fs("ls", url, ccache=none), url)
    no_ticket(fs("ls", url, ccache=none, conf=False), url)
    # a cache whose tickets are destroyed
    cc = tmp_path / "alice2.ccache"
    assert secure.kdc.kinit(f"alice@{secure.kdc.realm}", secure.kdc.keytabs / "alice.keytab",
                            cc).returncode == 0
    fs.ok("ls", url, ccache=cc)
    d = subprocess.run([kdcmod._which("kdestroy")], env=secure.kdc.env(cc), capture_output=True,
                       text=True, timeout=30)
    assert d.returncode == 0, d.stderr
    no_ticket(fs("ls", url, ccache=cc), url)


def test_an_expired_ticket_says_kinit(fs, secure, tmp_path):
    cc = tmp_path / "short.ccache"
    k = subprocess.run([kdcmod._which("kinit"), "-l", "3s", "-k", "-t",
                        str(secure.kdc.keytabs / "alice.keytab"), f"alice@{secure.kdc.realm}"],
                       env=secure.kdc.env(cc), capture_output=True, text=True, timeout=30)
    assert k.returncode == 0, k.stderr
    klist = kdcmod._which("klist")

    def expired():
        return subprocess.run([klist, "-s"], env=secure.kdc.env(cc), timeout=30).returncode != 0

    kdcmod.wait_for(expired, 30, "expiry of a 3 s ticket (klist -s)")
    no_ticket(fs("ls", secure.url("/user/alice"), ccache=cc), secure.url("/user/alice"))


def test_a_user_without_a_keytab_cannot_get_in(fs, secure, tmp_path):
    """bob has a principal but no keytab (and nobody knows his password):
    alice's keytab does not make him, and without a ticket loom is refused."""
    cc = tmp_path / "bob.ccache"
    r = secure.kdc.kinit(f"bob@{secure.kdc.realm}", secure.kdc.keytabs / "alice.keytab", cc)
    assert r.returncode != 0, "kinit bob with alice's keytab worked"
    no_ticket(fs("ls", secure.url("/user/alice"), ccache=cc), secure.url("/user/alice"))
    # and Java agrees: no way in without a ticket
    j = secure.java("-ls", "/user/alice", ccache=cc, check=False)
    assert j.returncode != 0


def test_a_keytab_logs_in_with_no_kinit_and_no_cache_file(fs, secure, tmp_path):
    """--principal and --keytab (or LOOM_KERBEROS_PRINCIPAL/_KEYTAB): loom
    gets alice's ticket from her keytab itself, keeps it in memory (the
    cache KRB5CCNAME names is never made) and the NameNode sees alice by
    Kerberos; the same with the variables and with no configuration."""
    realm, kt = secure.kdc.realm, secure.kdc.keytabs / "alice.keytab"
    none = tmp_path / "none.ccache"
    base = "/user/alice/kt"
    data = blob(200 * 1024 + 3, "keytab")
    (tmp_path / "kt.bin").write_bytes(data)
    fs.ok("--principal", f"alice@{realm}", "--keytab", kt, "mkdir", secure.url(base), ccache=none)
    fs.ok("--keytab", kt, "--principal", f"alice@{realm}", "put", tmp_path / "kt.bin",
          secure.url(f"{base}/f"), ccache=none)
    env = {"LOOM_KERBEROS_PRINCIPAL": f"alice@{realm}", "LOOM_KERBEROS_KEYTAB": str(kt)}
    r = fs.ok("cat", secure.url(f"{base}/f"), ccache=none, env=env, conf=False)
    assert sha(r.stdout) == sha(data)
    assert not none.exists(), "loom wrote a credentials cache file"
    assert ("true", f"alice@{realm}", "KERBEROS") in audit(secure, "create", f"{base}/f")
    assert sha(secure.java("-cat", f"{base}/f").stdout) == sha(data)
    fs.ok("rm", "-r", secure.url(base))


def test_a_bad_keytab_login_is_a_clear_error(fs, secure, tmp_path):
    realm, kt = secure.kdc.realm, secure.kdc.keytabs / "alice.keytab"
    url, none = secure.url("/user/alice"), tmp_path / "none.ccache"
    # a keytab without the principal: a usage error, before any connection
    r = fs("--keytab", kt, "ls", url, ccache=none)
    assert r.returncode == 2 and "--principal" in r.err and str(kt) in r.err, r.err
    r = fs("ls", url, "--keytab", ccache=none)
    assert r.returncode == 2, r.err
    # bob's principal is not in alice's keytab
    r = fs("--principal", f"bob@{realm}", "--keytab", kt, "ls", url, ccache=none)
    assert r.returncode == 1 and f"cannot log in as bob@{realm} with the keytab {kt}" in r.err, \
        r.err
    assert r.stdout == b"" and "Exception" not in r.err and r.seconds < 5, (r.seconds, r.err)
    # a keytab that cannot be read
    r = fs("--principal", f"alice@{realm}", "--keytab", tmp_path / "missing.keytab", "ls", url,
           ccache=none)
    assert r.returncode == 1 and "cannot read the keytab" in r.err and "missing.keytab" in r.err, \
        r.err
    # a keytab login does not fall back to the ticket cache: with alice's
    # cache at hand and bob's failed login, nothing is listed
    r = fs("--principal", f"bob@{realm}", "--keytab", kt, "ls", url)
    assert r.returncode == 1 and r.stdout == b"", r.err


def round_trip(fs, s, tmp_path, base, conf, name):
    """loom puts (more than one packet, not a round size) and Java reads;
    Java puts and loom reads: byte for byte. loom's debug log says the qop
    its DataTransferProtocol SASL settled on."""
    mine = blob(2 * MiB + 333, name)
    (tmp_path / f"{name}.loom").write_bytes(mine)
    r = fs.ok("put", tmp_path / f"{name}.loom", s.url(f"{base}/{name}.loom"), conf=conf,
              env={"LOOM_LOG": "debug:hadoop"})
    assert sha(s.java("-cat", f"{base}/{name}.loom").stdout) == sha(mine)
    theirs = blob(MiB + 1, f"{name}-java")
    (tmp_path / f"{name}.java").write_bytes(theirs)
    s.java("-put", tmp_path / f"{name}.java", f"{base}/{name}.java")
    assert sha(fs.ok("cat", s.url(f"{base}/{name}.java"), conf=conf).stdout) == sha(theirs)
    return set(re.findall(r"DataTransferProtocol SASL at "
                          r"(\S+(?: \(encrypted data transfer\))?(?:, then AES/CTR)?)$", r.err,
                          re.M))


def test_datanodes_that_ask_for_sasl(loom, secure, tmp_path):
    """DataNodes with dfs.data.transfer.protection (the way a secure
    DataNode runs without root) take a connection only after
    DataTransferProtocol's SASL handshake with the block token: loom does
    it on every read and write, at the strongest qop the DataNode offers
    and the client's configuration allows, and at integrity and privacy
    every byte after it goes through the SASL security layer (HMAC-MD5;
    and 3DES); Java reads what loom wrote and the other way round, at each
    level. A client and DataNodes with no level in common are a clear
    error naming both, at once, nothing written."""
    if not SANITIZED:
        pytest.skip(ASAN_ONLY)
    with other_hdfs(secure, tmp_path / "sasl", data_protection="authentication") as s:
        fs = Fs(loom, s)
        base = "/user/alice/sasl"
        fs.ok("mkdir", s.url(base))
        assert round_trip(fs, s, tmp_path, base, True, "auth") == {"auth"}
        # a client configuration that wants privacy on data transfer
        priv = conf_with(s, tmp_path / "priv", **{"dfs.data.transfer.protection": "privacy"})
        r = fs("put", tmp_path / "auth.loom", s.url(f"{base}/priv.bin"), conf=priv)
        assert r.returncode == 1, (r.returncode, r.err)
        assert "the DataNode offers qop auth and the client's dfs.data.transfer.protection " \
               "allows privacy" in r.err, r.err
        assert r.seconds < 30, r.seconds
        r = s.java("-test", "-s", f"{base}/priv.bin", check=False)
        assert r.returncode != 0  # nothing written: an empty file at most
    # DataNodes that take integrity or privacy, never plain authentication
    with other_hdfs(secure, tmp_path / "int", data_protection="integrity,privacy") as s:
        fs = Fs(loom, s)
        base = "/user/alice/layer"
        fs.ok("mkdir", s.url(base))
        for level, qop in (("integrity", "auth-int"), ("privacy", "auth-conf")):
            conf = conf_with(s, tmp_path / f"c-{level}", **{
                "dfs.data.transfer.protection": f"authentication,{level}"})
            assert round_trip(fs, s, tmp_path, base, conf, level) == {qop}, level
        both = conf_with(s, tmp_path / "both", **{
            "dfs.data.transfer.protection": "authentication"})
        (tmp_path / "x").write_bytes(b"x" * 1000)
        r = fs("put", tmp_path / "x", s.url(f"{base}/x.bin"), conf=both)
        assert r.returncode == 1, (r.returncode, r.err)
        assert "the DataNode offers qop auth-int,auth-conf" in r.err and \
            "allows authentication" in r.err, r.err
        assert r.seconds < 30, r.seconds
        r = s.java("-test", "-s", f"{base}/x.bin", check=False)
        assert r.returncode != 0  # nothing written: an empty file at most


def test_encrypted_data_transfer(loom, secure, tmp_path):
    """A cluster with dfs.encrypt.data.transfer (3des, and AES/CTR for
    clients that ask): every DataNode connection takes only the encrypted
    handshake, with the NameNode's data encryption key
    (getDataEncryptionKey; the cluster says so in its server defaults, the
    client's configuration need not). A client whose
    dfs.encrypt.data.transfer.cipher.suites names AES/CTR/NoPadding (the
    cluster's configuration) gets AES keys from the DataNode inside the
    handshake and the stream in AES/CTR; one that does not, DIGEST-MD5's
    3des layer. Either way Java reads what loom wrote and the other way
    round, byte for byte, with no dfs.data.transfer.protection anywhere."""
    if not SANITIZED:
        pytest.skip(ASAN_ONLY)
    with other_hdfs(secure, tmp_path / "enc", encrypt="3des") as s:
        fs = Fs(loom, s)
        base = "/user/alice/enc"
        fs.ok("mkdir", s.url(base))
        assert round_trip(fs, s, tmp_path, base, True, "aes") == \
            {"auth-conf (encrypted data transfer), then AES/CTR"}
        no_aes = conf_with(s, tmp_path / "no-aes",
                           **{"dfs.encrypt.data.transfer.cipher.suites": ""})
        assert round_trip(fs, s, tmp_path, base, no_aes, "3des") == \
            {"auth-conf (encrypted data transfer)"}


def test_delegation_tokens(fs, secure, tmp_path):
    """`loom fs fetchdt` gets an HDFS delegation token over Kerberos into a
    credentials file (0600), as `hdfs fetchdt`; a process with
    HADOOP_TOKEN_FILE_LOCATION naming it and no Kerberos ticket at all (what
    a YARN or Spark container has) reaches HDFS with it: loom's put and cat,
    the NameNode's audit saying auth:TOKEN for alice; Java's FsShell takes
    the same file. Its renewer renews it; once cancelled it is refused, the
    message naming the file."""
    tok = tmp_path / "alice.token"
    r = fs.ok("fetchdt", "--renewer", "alice", tok)
    out = r.stdout.decode()
    assert re.fullmatch(rf"{re.escape(str(tok))}: HDFS_DELEGATION_TOKEN for "
                        rf"127\.0\.0\.1:{secure.hdfs.nn}, renewer alice\n", out), out
    assert tok.stat().st_mode & 0o777 == 0o600
    only = {"HADOOP_TOKEN_FILE_LOCATION": str(tok)}
    base = "/user/alice/dt"
    # no ticket and no token: refused, as before
    no_ticket(fs("ls", secure.url("/user/alice"), ccache=None), secure.url("/user/alice"))
    # the token alone
    fs.ok("mkdir", secure.url(base), ccache=None, env=only)
    data = blob(MiB + 17, "dt")
    (tmp_path / "d").write_bytes(data)
    fs.ok("put", tmp_path / "d", secure.url(f"{base}/d.bin"), ccache=None, env=only)
    assert sha(fs.ok("cat", secure.url(f"{base}/d.bin"), ccache=None, env=only).stdout) == sha(data)
    assert ("true", f"alice@{secure.kdc.realm}", "TOKEN") in audit(secure, "create",
                                                                     f"{base}/d.bin")
    # Java's client takes loom's file
    e = secure.kdc.env(None, base=only)
    r = secure.hdfs.java("-cat", f"{base}/d.bin", env=e)
    assert sha(r.stdout) == sha(data)
    # the renewer renews it (over Kerberos), and the owner cancels it
    r = fs.ok("fetchdt", "--renew", tok)
    assert r.stdout.decode().startswith(f"{tok}: renewed until "), r.stdout
    r = fs.ok("fetchdt", "--cancel", tok)
    assert r.stdout.decode() == f"{tok}: cancelled\n", r.stdout
    r = fs("ls", secure.url(base), ccache=None, env=only)
    assert r.returncode == 1, (r.returncode, r.err)
    assert str(tok) in r.err and "HADOOP_TOKEN_FILE_LOCATION" in r.err, r.err
    assert r.seconds < 30, r.seconds
    fs.ok("rm", "-r", secure.url(base))
