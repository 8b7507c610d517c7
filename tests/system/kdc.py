"""A private MIT Kerberos KDC for the system tests (Debian's krb5-kdc,
krb5-admin-server and krb5-user: scripts/setup.sh installs them). Nothing
system-wide is read or written: the KDC's profile (KRB5_KDC_PROFILE), the
clients' krb5.conf (KRB5_CONFIG), the database, its stash, the keytabs and
every credentials cache live in one directory, and the KDC runs in the
foreground (`krb5kdc -n`) as a child of the test, on 127.0.0.1 on a free
port, TCP (udp_preference_limit = 1). The global /etc/krb5.conf that the
packages install is never consulted.

Kdc(d).start() makes realm LOOM.TEST with the service principals
nn/localhost, dn/localhost and HTTP/localhost (keytabs in d/keytabs/, as
scripts/yarn-cluster.sh --kerberos d reads them), a user `alice` with a
keytab (d/keytabs/alice.keytab) and a user `bob` with a random password
nobody keeps (no keytab: he cannot get a ticket). stop() ends the KDC and
waits until its process is gone; nothing else runs."""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REALM = "LOOM.TEST"
SERVICES = ("nn/localhost", "dn/localhost", "HTTP/localhost")
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit", "klist", "kdestroy")


def _which(tool):
    # the admin tools are in /usr/sbin, which a user's PATH may lack
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")


def available():
    """None when the MIT tools are installed, else why not."""
    missing = [t for t in TOOLS if not _which(t)]
    if missing:
        return (f"MIT Kerberos is not installed ({', '.join(missing)} missing): "
                "scripts/setup.sh installs krb5-kdc krb5-admin-server krb5-user")
    return None


def _free_port():
    """A port free for both TCP and UDP on 127.0.0.1 (the KDC binds both)."""
    for _ in range(50):
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                    u.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free for both TCP and UDP on 127.0.0.1")


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout}s")
        time.sleep(0.05)


class Kdc:
    def __init__(self, d: Path, realm=REALM):
        self.dir = Path(d)
        self.realm = realm
        self.keytabs = self.dir / "keytabs"
        self.krb5_conf = self.dir / "krb5.conf"
        self.port = None
        self.proc = None

    # ---- the environment every Kerberos client and tool here runs with

    def env(self, ccache=None, base=None):
        """base (os.environ) with this KDC's krb5.conf and the credentials
        cache ccache (a path: FILE:path), or none at all when ccache is None
        (KRB5CCNAME points at a file that does not exist)."""
        e = dict(os.environ if base is None else base)
        e["KRB5_CONFIG"] = str(self.krb5_conf)
        e["KRB5_KDC_PROFILE"] = str(self.dir / "kdc.conf")
        # a plain path (a FILE: cache): the JDK's Kerberos reads it too
        e["KRB5CCNAME"] = str(ccache if ccache else self.dir / "no-such-ccache")
        e.pop("KRB5_CLIENT_KTNAME", None)
        e.pop("KRB5_KTNAME", None)
        return e

    def _run(self, *cmd, timeout=30, check=True):
        r = subprocess.run([_which(cmd[0]) or cmd[0], *cmd[1:]], env=self.env(),
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def _write_conf(self):
        d, r, p = self.dir, self.realm, self.port
        (d / "kdc.conf").write_text(f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{p}
    kdc_tcp_listen = 127.0.0.1:{p}

[realms]
    {r} = {{
        database_name = {d}/db/principal
        key_stash_file = {d}/db/stash
        acl_file = {d}/kadm5.acl
        admin_keytab = {d}/db/kadm5.keytab
        kdc_listen = 127.0.0.1:{p}
        kdc_tcp_listen = 127.0.0.1:{p}
        max_life = 1h
        max_renewable_life = 1d
        master_key_type = aes256-cts-hmac-sha1-96
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{d}/kdc.log
    admin_server = FILE:{d}/kadmin.log
    default = FILE:{d}/krb5lib.log
""")
        (d / "kadm5.acl").write_text("")
        self.krb5_conf.write_text(f"""[libdefaults]
    default_realm = {r}
    dns_lookup_realm = false
    dns_lookup_kdc = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    ticket_lifetime = 1h
    renew_lifetime = 1d
    forwardable = false
    permitted_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
    default_ccache_name = FILE:{d}/no-such-ccache
    default_client_keytab_name = FILE:{d}/no-such-client-keytab

[realms]
    {r} = {{
        kdc = 127.0.0.1:{p}
    }}

[domain_realm]
    localhost = {r}
""")

    def start(self, timeout=60):
        why = available()
        if why:
            raise RuntimeError(why)
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "db").mkdir(exist_ok=True)
        self.keytabs.mkdir(exist_ok=True)
        self.port = _free_port()
        self._write_conf()
        self._run("kdb5_util", "-r", self.realm, "-P", secrets.token_hex(16), "create", "-s")
        qs = []
        for name in SERVICES + ("alice",):
            file = self.keytabs / f"{name.split('/')[0]}.keytab"
            qs += [f"addprinc -randkey {name}", f"ktadd -k {file} {name}"]
        qs.append(f"addprinc -pw {secrets.token_hex(16)} bob")
        for q in qs:
            self._run("kadmin.local", "-r", self.realm, "-q", q)
        (self.dir / "realm").write_text(self.realm + "\n")
        log = open(self.dir / "krb5kdc.out", "ab")
        self.proc = subprocess.Popen([_which("krb5kdc"), "-n", "-r", self.realm],
                                     env=self.env(), stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

        def serving():
            if self.proc.poll() is not None:
                raise RuntimeError(f"krb5kdc exited ({self.proc.returncode}): "
                                   f"{(self.dir / 'krb5kdc.out').read_text()[-2000:]}"
                                   f"{self._log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                return False

        try:
            wait_for(serving, timeout, f"KDC listening on 127.0.0.1:{self.port}")
        except BaseException:
            self.stop()
            raise
        return self

    def _log_tail(self):
        p = self.dir / "kdc.log"
        return p.read_text(errors="replace")[-2000:] if p.exists() else ""

    def kinit(self, principal, keytab, ccache, timeout=30):
        """A ticket for principal from keytab into the cache file ccache;
        the completed process (its returncode says whether it worked)."""
        return subprocess.run([_which("kinit"), "-k", "-t", str(keytab), principal],
                              env=self.env(ccache), capture_output=True, text=True,
                              timeout=timeout)

    def stop(self, timeout=20):
        """Ends the KDC (SIGTERM, then SIGKILL) and waits until it is gone."""
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=timeout)
        assert p.poll() is not None, f"krb5kdc {p.pid} outlived stop()"
