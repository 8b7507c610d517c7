#!/usr/bin/python3
"""report_hosts.py: turns the raw figure lines of bench/allreduce/hosts.sh
(allreduce across three network namespaces, one rank each) into its report.
Reads the raw file named first (or stdin); a second file, if named, holds
comment lines to pass through (where the ranks ran, how busy the machine
was). Pools the rounds as report.py does: a figure is the median of the
per-iteration samples (each the slowest rank's time) of every round.

Every figure is world size 3 over TCP across the namespaces:

  busbw_GBps  = bytes / median_s / 1e9 * 2(n-1)/n
  ratio       = loom busbw / Open MPI busbw = mpi median_s / loom median_s
                (at 4 KiB: Open MPI's latency over loom's; > 1: loom faster)
  ratio_vs_gloo = gloo median_s / loom median_s
  tls_cost    = 1 - busbw(loom_tls) / busbw(loom)  (loom_tls lines only; at
                4 KiB, 1 - latency(loom) / latency(loom_tls))

Goals (README.md, "Across hosts"): loom without TLS >= 1.0x Open MPI's
busbw at 16 and 64 MiB; TLS costs at most 15% of loom's busbw at 64 MiB.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import KIB, MIB, fmt, human, parse, pool  # noqa: E402

PEERS = ("mpi", "gloo", "loom", "loom_tls")
LAT_SIZE = 4 * KIB
# goal, peer, size, value key, target, comparison
GOALS = [("busbw_vs_mpi", "loom", 16 * MIB, "ratio", 1.0, ">="),
         ("busbw_vs_mpi", "loom", 64 * MIB, "ratio", 1.0, ">="),
         ("tls_cost", "loom_tls", 64 * MIB, "tls_cost", 0.15, "<=")]


def main():
    src = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    comments = open(sys.argv[2]).read().splitlines() if len(sys.argv) > 2 else []
    raw, skips = {}, []
    for line in src:
        line = line.strip()
        if not line.startswith("name=allreduce "):
            continue
        d = parse(line)
        if d.get("skipped"):
            line = line.replace("name=allreduce ", "name=allreduce_hosts ", 1)
            line = line.replace(" transport=tcp", "", 1)
            if line not in skips:
                skips.append(line)
            continue
        raw.setdefault((d["peer"], int(d["bytes"])), []).append(d)
    figs = {k: pool(v) for k, v in raw.items()}

    def med(peer, b):
        d = figs.get((peer, b))
        return float(d["median_s"]) if d else None

    def over(a, b):
        return a / b if a and b else None

    print(__doc__.strip().replace("\n", "\n# ").replace("# \n", "#\n")
          .join(["# ", ""]))
    for c in comments:
        print(c)

    values = {}  # (peer, bytes) -> {"ratio":, "ratio_vs_gloo":, "tls_cost":}
    sizes = sorted({b for _, b in figs})
    for b in sizes:
        for peer in PEERS:
            d = figs.get((peer, b))
            if not d:
                continue
            s = float(d["median_s"])
            out = (f"name=allreduce_hosts peer={peer} n={d['n']} bytes={b} "
                   f"rounds={d['rounds']} iters={d['iters']} median_s={d['median_s']} "
                   f"min_s={d['min_s']} busbw_GBps={d['busbw_GBps']}")
            if b == LAT_SIZE:
                out += f" latency_us={s * 1e6:.1f}"
            if peer.startswith("loom"):
                v = {"ratio": over(med("mpi", b), s), "ratio_vs_gloo": over(med("gloo", b), s)}
                if peer == "loom_tls":
                    plain = over(med("loom", b), s)
                    v["tls_cost"] = None if plain is None else 1 - plain
                values[(peer, b)] = v
                out += "".join(f" {k}={fmt(x)}" for k, x in v.items())
            print(out + f" round_medians_s={d['round_medians_s']}")
    for line in skips:
        print(line)

    rows = []
    for goal, peer, b, key, target, cmp in GOALS:
        x = values.get((peer, b), {}).get(key)
        ok = None if x is None else x >= target if cmp == ">=" else x <= target
        status = "NA" if ok is None else "PASS" if ok else "FAIL"
        rows.append((goal, peer, b, key, x, cmp, target, status))
        print(f"name=allreduce_hosts_goal goal={goal} peer={peer} n=3 bytes={b} "
              f"{key}={fmt(x)} target={cmp}{target:.2f} status={status}")

    print()
    print("allreduce across 3 namespaces, one rank each, TCP "
          "(ratio = mpi median_s / loom median_s; > 1: loom better)")
    print("%6s %11s %11s %11s %11s %9s %9s %9s %9s" % (
        "size", "mpi", "gloo", "loom", "loom_tls", "loom/mpi", "tls/mpi",
        "loom/gloo", "tls_cost"))
    for b in sizes:
        def cell(peer):
            d = figs.get((peer, b))
            if not d:
                return "-"
            if b == LAT_SIZE:
                return f"{float(d['median_s']) * 1e6:.0f}us"
            return f"{float(d['busbw_GBps']):.3f}GB/s"
        lv, tv = values.get(("loom", b), {}), values.get(("loom_tls", b), {})
        print("%6s %11s %11s %11s %11s %9s %9s %9s %9s" % (
            human(b), cell("mpi"), cell("gloo"), cell("loom"), cell("loom_tls"),
            fmt(lv.get("ratio"), ".2f"), fmt(tv.get("ratio"), ".2f"),
            fmt(lv.get("ratio_vs_gloo"), ".2f"), fmt(tv.get("tls_cost"), ".3f")))
    print("(4 KiB: median latency; 16 and 64 MiB: busbw)")
    met = sum(1 for r in rows if r[7] == "PASS")
    known = sum(1 for r in rows if r[7] != "NA")
    print(f"goals met: {met} of {known} measured ({len(rows)} in all)")
    for goal, peer, b, key, x, cmp, target, status in rows:
        if status == "FAIL":
            print(f"  missed: {goal} {peer} {human(b)}: {key} {fmt(x)}, want {cmp} {target:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
