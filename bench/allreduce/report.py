#!/usr/bin/python3
"""report.py: turns the raw figure lines of bench/allreduce/run.sh into its
report: every figure with loom's ratios added, one line per goal, and a
summary table. Reads the raw file named first on the command line (or
stdin); a second file, if named, holds comment lines to pass through (how
busy the machine was).

run.sh runs every peer in several rounds; a figure pools the per-iteration
samples (samples_s=, each the slowest rank's time) of all rounds of one
(peer, transport, n, bytes) and takes their median; rounds= says how many
rounds it pools and round_medians_s= gives each round's own median, to show
how steady the machine was. The memcpy figure is the median of the rounds'
medians.

Ratios, all defined so that > 1 means loom is better; each compares one loom
figure (transport t, world n, size b) with a peer's at the same n and b:

  ratio_vs_mpi_shm = mpi_shm_median_s / loom_median_s
  ratio_vs_mpi_tcp = mpi_tcp_median_s / loom_median_s
  ratio_vs_gloo    = gloo_median_s    / loom_median_s

At the same n and b, busbw = b / median_s * 2(n-1)/n for both sides, so the
ratio is also loom_busbw / peer_busbw (bandwidth sizes); at 4 KiB read it as
peer latency / loom latency. busbw_vs_memcpy = busbw / single-core memcpy
GBps (how close a figure gets to the machine's copy ceiling).

Goals (README.md): at 16 and 64 MiB, loom over shared memory >= 1.0x Open
MPI shm and >= 3x Gloo, loom over TCP >= 1.0x Open MPI TCP; at 4 KiB, loom
shm latency <= 2x Open MPI shm, i.e. ratio_vs_mpi_shm >= 0.5.
"""
import sys

KIB, MIB = 1 << 10, 1 << 20
BW_SIZES = (16 * MIB, 64 * MIB)
LAT_SIZE = 4 * KIB
# goal name, loom transport, peer key, sizes, minimum ratio
GOALS = [
    ("busbw_vs_mpi_shm", "shm", "mpi_shm", BW_SIZES, 1.0),
    ("busbw_vs_gloo", "shm", "gloo", BW_SIZES, 3.0),
    ("tcp_busbw_vs_mpi_tcp", "tcp", "mpi_tcp", BW_SIZES, 1.0),
    ("latency_vs_mpi_shm", "shm", "mpi_shm", (LAT_SIZE,), 0.5),
]
PEER_ORDER = [("mpi", "shm"), ("mpi", "tcp"), ("gloo", "tcp"),
              ("loom", "shm"), ("loom", "tcp")]


def parse(line):
    """key=value fields; reason= (on a skip) runs to the end of the line."""
    head, sep, reason = line.partition(" reason=")
    d = dict(f.split("=", 1) for f in head.split() if "=" in f)
    if "skipped" in head.split():
        d["skipped"] = True
        d["reason"] = reason if sep else ""
    return d


def human(b):
    return f"{b // MIB}MiB" if b >= MIB and b % MIB == 0 else \
        f"{b // KIB}KiB" if b % KIB == 0 else f"{b}B"


def fmt(x, spec=".3f"):
    return "NA" if x is None else format(x, spec)


def median(xs):
    xs = sorted(xs)
    k = len(xs)
    return xs[k // 2] if k % 2 else 0.5 * (xs[k // 2 - 1] + xs[k // 2])


def pool(lines):
    """One figure from the raw lines of the rounds of one key."""
    samples = []
    for d in lines:
        if "samples_s" in d:
            samples += [float(x) for x in d["samples_s"].split(",") if x]
        else:  # a line without samples stands for itself
            samples += [float(d["median_s"])] * int(d.get("iters", 1))
    d = dict(lines[0])
    n, b = int(d["n"]), int(d["bytes"])
    med = median(samples)
    algbw = b / med / 1e9
    d["round_medians_s"] = ",".join(
        f"{float(x['median_s']):.9f}" for x in lines)
    d.update(iters=str(len(samples)), rounds=str(len(lines)),
             median_s=f"{med:.9f}", min_s=f"{min(samples):.9f}",
             algbw_GBps=f"{algbw:.4f}",
             busbw_GBps=f"{algbw * 2 * (n - 1) / n:.4f}")
    return d


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    comments = open(sys.argv[2]).read().splitlines() if len(sys.argv) > 2 else []
    memcpys, raw, skips = [], {}, []
    for line in src:
        line = line.strip()
        if not line.startswith("name="):
            continue
        d = parse(line)
        if d.get("skipped"):
            if line not in skips:
                skips.append(line)
        elif d["name"] == "memcpy":
            memcpys.append(d)
        elif d["name"] == "allreduce":
            key = (d["peer"], d["transport"], int(d["n"]), int(d["bytes"]))
            raw.setdefault(key, []).append(d)
    figs = {k: pool(v) for k, v in raw.items()}
    memcpy = None
    if memcpys:
        med = median(float(d["median_s"]) for d in memcpys)
        b = int(memcpys[0]["bytes"])
        memcpy = {"name": "memcpy", "bytes": str(b),
                  "iters": str(sum(int(d["iters"]) for d in memcpys)),
                  "rounds": str(len(memcpys)), "median_s": f"{med:.9f}",
                  "GBps": f"{b / med / 1e9:.4f}"}

    ceiling = float(memcpy["GBps"]) if memcpy and "GBps" in memcpy else None

    def med(peer, transport, n, b):
        d = figs.get((peer, transport, n, b))
        return float(d["median_s"]) if d else None

    def ratio(peer_key, n, b, loom_s):
        peer, transport = {"mpi_shm": ("mpi", "shm"), "mpi_tcp": ("mpi", "tcp"),
                           "gloo": ("gloo", "tcp")}[peer_key]
        p = med(peer, transport, n, b)
        return p / loom_s if p and loom_s else None

    print(__doc__.strip().replace("\n", "\n# ").replace("# \n", "#\n")
          .join(["# ", ""]))
    for c in comments:
        print(c)
    if memcpy:
        print(" ".join(f"{k}={v}" for k, v in memcpy.items()))

    worlds = sorted({k[2] for k in figs})
    sizes = sorted({k[3] for k in figs})
    for n in worlds:
        for b in sizes:
            for peer, transport in PEER_ORDER:
                d = figs.get((peer, transport, n, b))
                if not d:
                    continue
                out = (f"name=allreduce peer={peer} transport={transport} n={n} "
                       f"bytes={b} rounds={d['rounds']} iters={d['iters']} "
                       f"median_s={d['median_s']} "
                       f"min_s={d['min_s']} algbw_GBps={d['algbw_GBps']} "
                       f"busbw_GBps={d['busbw_GBps']}")
                tail = f" round_medians_s={d['round_medians_s']}"
                if ceiling:
                    out += f" busbw_vs_memcpy={float(d['busbw_GBps']) / ceiling:.3f}"
                if peer == "loom":
                    s = float(d["median_s"])
                    for pk in ("mpi_shm", "mpi_tcp", "gloo"):
                        out += f" ratio_vs_{pk}={fmt(ratio(pk, n, b, s))}"
                print(out + tail)
    for line in skips:
        print(line)

    goal_rows = []
    for goal, transport, pk, gsizes, target in GOALS:
        for n in worlds:
            for b in gsizes:
                r = ratio(pk, n, b, med("loom", transport, n, b))
                status = "NA" if r is None else "PASS" if r >= target else "FAIL"
                goal_rows.append((goal, transport, n, b, r, target, status))
                print(f"name=allreduce_goal goal={goal} transport={transport} "
                      f"n={n} bytes={b} ratio={fmt(r)} target={target:.1f} "
                      f"status={status}")

    print()
    print("loom allreduce vs peers (ratio = peer median_s / loom median_s; "
          "> 1: loom better)")
    hdr = ("transport", "n", "size", "loom_median_s", "loom_busbw_GBps",
           "vs_mpi_shm", "vs_mpi_tcp", "vs_gloo", "busbw/memcpy")
    print("%-9s %2s %6s %13s %15s %10s %10s %8s %12s" % hdr)
    any_loom = False
    for transport in ("shm", "tcp"):
        for n in worlds:
            for b in sizes:
                d = figs.get(("loom", transport, n, b))
                if not d:
                    continue
                any_loom = True
                s, bw = float(d["median_s"]), float(d["busbw_GBps"])
                print("%-9s %2d %6s %13.6f %15.3f %10s %10s %8s %12s" % (
                    transport, n, human(b), s, bw,
                    fmt(ratio("mpi_shm", n, b, s)), fmt(ratio("mpi_tcp", n, b, s)),
                    fmt(ratio("gloo", n, b, s)),
                    fmt(bw / ceiling if ceiling else None)))
    if not any_loom:
        print("(no loom figures: see the peer=loom skipped lines above)")
    met = sum(1 for g in goal_rows if g[6] == "PASS")
    known = sum(1 for g in goal_rows if g[6] != "NA")
    print(f"goals met: {met} of {known} measured ({len(goal_rows)} in all)")
    for g in goal_rows:
        if g[6] == "FAIL":
            print(f"  missed: {g[0]} n={g[2]} {human(g[3])}: "
                  f"{fmt(g[4])} < {g[5]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
