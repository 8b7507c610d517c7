"""A task of tests/system/test_spark.py that reads the feed loom.spark
filled from a DataFrame of Fashion-MNIST rows (784 image bytes, 1 label
byte: 785-byte records).

    feedtask.py count   prints, per epoch it read records of (the feed's
                        epoch number), FEED task=.. epoch=.. rows=.. sum=..
                        (sum: of every byte of every record it read),
                        and FIRST task=.. t=<time.time()> at its first record
    feedtask.py infer   writes one line a record to the feed's output:
                        "<label>,<image byte sum>"
"""
import os
import sys
import time

import numpy as np

import loom

mode = sys.argv[1]
delay = float(os.environ.get("FEEDTASK_DELAY", "0"))  # seconds a record, to be slow
me = loom.task().task
f = loom.Feed()
buf = np.empty((512, 785), dtype=np.uint8)
per_epoch = {}  # the feed's epoch number (f.epoch) -> [rows, sum]

while True:
    b = f.array_batch(512, 785, out=buf) if mode == "count" else f.array_batch(1, 785, out=buf[:1])
    if b is loom.END:
        break
    if b is loom.EPOCH:
        continue
    if not per_epoch:
        print(f"FIRST task={me} t={time.time():.3f}", flush=True)
    e = per_epoch.setdefault(f.epoch, [0, 0])  # a batch never spans two epochs
    e[0] += len(b)
    e[1] += int(b.sum(dtype=np.uint64))
    if delay:
        time.sleep(delay)
    if mode == "infer":
        f.write(f"{int(b[0, 784])},{int(b[0, :784].sum(dtype=np.uint64))}\n")
for epoch, (rows, total) in sorted(per_epoch.items()):
    print(f"FEED task={me} epoch={epoch} rows={rows} sum={total}", flush=True)
f.close()
