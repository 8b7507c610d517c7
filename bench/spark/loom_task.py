"""The loom side's task in bench/spark: reads the feed loom.spark filled
from the Fashion-MNIST DataFrame (785-byte records: 784 image bytes, the
label byte).

    loom_task.py count   counts and checksums what it reads; prints once at
                         the end: BENCHFEED task=.. rows=.. sum=.. (sum: of
                         every byte of every record, all epochs)
    loom_task.py infer   writes one line a record to the feed's output:
                         "<label>,<image byte sum>"
"""
import sys

import numpy as np

import loom

mode = sys.argv[1]
me = loom.task().task
f = loom.Feed()
# infer too reads 512 records a call: a batch never spans two splits, so the
# batch's lines all go to its split's output (exactly once, per split)
batch = 512
buf = np.empty((batch, 785), dtype=np.uint8)
rows, total = 0, 0
while True:
    b = f.array_batch(batch, 785, out=buf)
    if b is loom.END:
        break
    if b is loom.EPOCH:
        continue
    rows += len(b)
    if mode == "count":
        total += int(b.sum(dtype=np.uint64))
    else:
        sums = b[:, :784].sum(axis=1, dtype=np.uint64)
        f.write("".join(f"{int(l)},{int(s)}\n" for l, s in zip(b[:, 784], sums)))
print(f"BENCHFEED task={me} rows={rows} sum={total}", flush=True)
f.close()
