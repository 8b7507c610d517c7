"""feedprobe.py: the Python twin of feedprobe.c, through the loom Python
module: reads the job's feed to the end (one record at a time, in batches,
with read() or with read_view()), writes "out:<record>\\n" for each when
the spec has feed.output ("out:<record in hex>\\n" with --hex), and prints
"FEEDOK task=... records=... epochs=...".

    python3 feedprobe.py [--mode next|batch|read|view] [--hex] [--no-marshal]
                         [--fail-after K]"""
import argparse
import os
import sys
import time

import loom

ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="next", choices=["next", "iter", "batch", "read", "view"])
ap.add_argument("--hex", action="store_true", help="write each record in hex (binary records)")
ap.add_argument("--no-marshal", action="store_true",
                help="batch() cuts by the offsets (its path where marshal is not usable)")
ap.add_argument("--sleep-us", type=int, default=0, help="sleep this long after each record")
ap.add_argument("--fail-after", type=int, default=-1, help="exit 3 after K records on attempt 0")
a = ap.parse_args()
if os.environ.get("LOOM_ATTEMPT", "0") != "0":
    a.fail_after = -1

n = 0
epochs = 1
with loom.Feed() as feed:
    if a.no_marshal:
        feed._marshal = False
    output = True

    def take(rec):
        global n, output
        if output:
            try:
                feed.write(b"out:" + (rec.hex().encode() if a.hex else rec) + b"\n")
            except loom.LoomError as e:
                if e.name != "LOOM_ESTATE":
                    raise
                output = False  # no feed.output in the spec
        n += 1
        if a.sleep_us:
            time.sleep(a.sleep_us / 1e6)
        if n == a.fail_after:
            print(f"feedprobe.py: failing on purpose after {n} records", file=sys.stderr)
            sys.stdout.flush()
            os._exit(3)

    if a.mode == "iter":  # `for rec in feed`: epochs are skipped, counted by feed.epoch
        for rec in feed:
            take(rec)
            epochs = feed.epoch + 1
    while a.mode != "iter":
        if a.mode == "next":
            r = feed.next()
            got = r if r in (loom.END, loom.EPOCH) else [r]
        elif a.mode == "batch":
            got = feed.batch(32)
        elif a.mode == "view":
            res = feed.read_view(32, 16)  # small: records past 16 bytes grow it
            if res in (loom.END, loom.EPOCH):
                got = res
            else:
                data, offs = res
                assert data.readonly and offs.readonly and offs.format == "Q"
                assert offs[0] == 0 and offs[-1] == len(data) and 1 <= len(offs) - 1 <= 32
                got = [bytes(data[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)]
        else:
            res = feed.read(32, 16)  # small: records past 16 bytes grow it
            if res in (loom.END, loom.EPOCH):
                got = res
            else:
                buf, sizes = res
                got, at = [], 0
                for s in sizes:
                    got.append(buf[at:at + s])
                    at += s
        if got is loom.END:
            break
        if got is loom.EPOCH:
            epochs += 1
            continue
        for rec in got:
            take(rec)
    st = feed.stats()
    ph = feed.loom.phases()  # where this process's time went, as libloom saw it
    print(f"PHASES task={os.environ.get('LOOM_TASK')} wall={ph['wall']:.6f} "
          f"compute={ph['compute']:.6f} comm={ph['comm']:.6f} "
          f"wait_peers={ph['wait_peers']:.6f} wait_data={ph['wait_data']:.6f} "
          f"feed_wait={st['wait_s']:.6f}", flush=True)
    print(f"FEEDOK task={os.environ.get('LOOM_TASK')} records={st['records']} "
          f"splits={st['splits']} stale={st['stale']} epochs={epochs}", flush=True)
