"""bench/yarn/rss.py: the peak memory of an application master, sampled.

    rss.py --pidfiles GLOB [--prefix TEXT]... [--contains TEXT] [--interval 0.05]

Every INTERVAL seconds it reads the pid in each file that GLOB names (the
files may appear later, and go), takes that process and its descendants,
keeps those whose command line (its words joined by spaces) starts with
one of the --prefix texts and contains the --contains text (each test
passes when not given), and reads VmRSS and VmHWM from /proc/PID/status. On SIGTERM or SIGINT it prints
one line and exits:

    hwm=<bytes> rss=<bytes> pids=<count> cmd=<the largest one's argv[0..1]>

hwm: the largest VmHWM (the kernel's own peak of resident memory, so no
peak between two samples is missed) of one selected process, as last read
while it lived; rss: the largest sum of VmRSS over the selected processes
in one sample; pids: how many distinct processes were selected. Only the
standard library: run it with any python3.

loom: GLOB is a file holding the pid of `timeout ... loom run` and the
prefix `.../loom run ` (the coordinator runs in that process; not the
`timeout` around it). skein's AM: GLOB is the NodeManagers' container pid
files (<local-dir>/nmPrivate/<app>/<container>/<container>.pid: the shell
that execs into the container's command), the prefix `$JAVA_HOME/bin/java `
(the JVM, not the shell that started it) and --contains the AM's main
class. skein's client: python and its driver JVM (two prefixes).
"""

import argparse
import glob
import signal
import sys
import time


def status_kb(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    return out


def children(pid: int) -> list:
    kids = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def cmdline(pid: int) -> list:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\0")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pidfiles", required=True, help="glob of files each holding a pid")
    ap.add_argument("--prefix", action="append", default=[])
    ap.add_argument("--contains", default=None)
    ap.add_argument("--interval", type=float, default=0.05)
    a = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    hwm = {}  # pid -> last VmHWM read
    names = {}
    rss_peak = 0
    while not stop:
        roots = []
        for path in glob.glob(a.pidfiles):
            try:
                with open(path) as f:
                    roots.append(int(f.read().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        seen = set()
        total = 0
        while roots:
            pid = roots.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                argv = cmdline(pid)
                roots += children(pid)
                line = " ".join(argv)
                if (not a.prefix or line.startswith(tuple(a.prefix))) and (
                    a.contains is None or a.contains in line
                ):
                    st = status_kb(pid)
                    if "VmHWM" in st:  # not a zombie
                        hwm[pid] = st["VmHWM"]
                        names[pid] = " ".join(argv[:2])
                        total += st.get("VmRSS", 0)
            except OSError:
                continue  # gone between two reads
        rss_peak = max(rss_peak, total)
        time.sleep(a.interval)
    top = max(hwm, key=hwm.get) if hwm else None
    print(
        f"hwm={hwm[top] if top else 0} rss={rss_peak} pids={len(hwm)} "
        f"cmd={(names[top] if top else '-').replace(' ', '_')[:200]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
