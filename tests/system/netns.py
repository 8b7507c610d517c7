"""Hosts on one machine for system tests: network namespaces joined by a
bridge, so that agents, tasks and the coordinator talk over a real link
with addresses of their own.

Hosts(n) makes n namespaces h0..h<n-1> and a hub namespace holding the
bridge (nothing is created in the machine's own namespace). Each host has

  lan0  10.77.K.<i+1>/24, a veth whose other end is on the hub's bridge:
        every host reaches every other one;
  iso0  10.78.<i>.1/24, a veth whose other end (iso1) stays in the same
        namespace: it reaches nothing. It is made first, so that it comes
        before lan0 in the interface list (a "first interface" choice
        picks it);
  lo    up.

K comes from the test's pid (the range is the test's own), and every name
has the pid in it, so that tests running at once do not clash. close()
(and leaving the `with` block, whatever happened inside) kills every
process still in a namespace, deletes the namespaces, and checks that
`ip netns list` and `ip link` name none of them."""
import os
import signal
import subprocess
import time


def ip(*args, check=True):
    """Runs `ip ARGS`; a failure raises with ip's own message."""
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r.stdout


def available():
    """Why hosts cannot be made here, or None: they need root and ip(8)
    with veth and bridge links."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    try:
        ip("-V")
    except (OSError, RuntimeError) as e:
        return f"needs ip(8) from iproute2: {e}"
    return None


class Hosts:
    def __init__(self, n=3):
        pid = os.getpid()
        self.tag = f"loomt{pid}"
        self.k = 16 + pid % 224
        self.hub = f"{self.tag}-hub"
        self.names = [f"{self.tag}-h{i}" for i in range(n)]
        self.addrs = [f"10.77.{self.k}.{i + 1}" for i in range(n)]
        self.iso = [f"10.78.{i}.1" for i in range(n)]
        self.made = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _ns(self, name):
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _make(self):
        self._ns(self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            self._ns(ns)
            ip("-n", ns, "link", "add", "iso0", "type", "veth", "peer", "name", "iso1")
            ip("-n", ns, "addr", "add", f"{self.iso[i]}/24", "dev", "iso0")
            ip("-n", ns, "link", "set", "iso0", "up")
            ip("-n", ns, "link", "set", "iso1", "up")
            ip("-n", self.hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "lan0",
               "netns", ns)
            ip("-n", self.hub, "link", "set", f"p{i}", "master", "br0")
            ip("-n", self.hub, "link", "set", f"p{i}", "up")
            ip("-n", ns, "addr", "add", f"{self.addrs[i]}/24", "dev", "lan0")
            ip("-n", ns, "link", "set", "lan0", "up")

    def exec_args(self, i, *cmd):
        """The command line that runs cmd on host i."""
        return ["ip", "netns", "exec", self.names[i], *map(str, cmd)]

    def close(self):
        """Kills what still runs in the namespaces, deletes them, and checks
        that nothing of the test's is left."""
        errors = []
        for ns in reversed(self.made):
            pids = ip("netns", "pids", ns, check=False).split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            # a namespace with processes in it outlives its name: wait for them
            end = time.time() + 10
            while pids and time.time() < end:
                pids = ip("netns", "pids", ns, check=False).split()
                time.sleep(0.05)
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self.made = []
        left = [l for l in ip("netns", "list", check=False).splitlines() if self.tag in l]
        left += [l for l in ip("-o", "link", check=False).splitlines() if self.tag in l]
        if errors or left:
            raise AssertionError(f"network namespaces not cleaned up: {errors} {left}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
