"""pyfeed.py: the same reading through loom's feed from Python, in a job:
  iter    for rec in feed: a bytes object at a time (batch() under it)
  batch   Feed.batch(1024): a list of bytes objects a call
  read    Feed.read(1024): one buffer and the sizes a call
  view    Feed.read_view(1024): memoryviews of the batch and its offsets, no copy
  array N Feed.array_batch(1024, N, out=buf): into one numpy array, reused
Prints "records=N bytes=B seconds=S cpu=C"."""
import sys
import resource
import time

import loom

mode = sys.argv[1]
t0 = time.perf_counter()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


c0 = cpu()
n = b = 0
with loom.Feed() as feed:
    if mode == "iter":
        for r in feed:
            n += 1
            b += len(r)
    while mode != "iter":
        if mode == "batch":
            got = feed.batch(1024)
            if got is loom.END:
                break
            if got is loom.EPOCH:
                continue
            for r in got:
                n += 1
                b += len(r)
        elif mode == "read":
            got = feed.read(1024)
            if got is loom.END:
                break
            if got is loom.EPOCH:
                continue
            n += len(got[1])
            b += sum(got[1])
        elif mode == "view":
            got = feed.read_view(1024)
            if got is loom.END:
                break
            if got is loom.EPOCH:
                continue
            offs = got[1]
            n += len(offs) - 1
            b += offs[-1]
        else:
            if n == 0 and b == 0:
                import numpy as np
                buf = np.empty((1024, int(sys.argv[2])), np.uint8)
            got = feed.array_batch(1024, int(sys.argv[2]), out=buf)
            if got is loom.END:
                break
            if got is loom.EPOCH:
                continue
            n += got.shape[0]
            b += got.nbytes
print(f"records={n} bytes={b} seconds={time.perf_counter() - t0:.6f} cpu={cpu() - c0:.6f}")
