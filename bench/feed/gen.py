"""gen.py: the benchmark's input: NFILES files of lines (20..180 bytes, about
100 on average) and NFILES files of 128-byte records, MB megabytes each
kind in all.  python3 gen.py OUT_DIR MB NFILES"""
import os
import random
import sys

out, mb, nfiles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
random.seed(1)
alpha = b"abcdefghijklmnopqrstuvwxyz0123456789" * 8
per = (mb << 20) // nfiles
for i in range(nfiles):
    parts, n = [], 0
    while n < per:
        l = random.randint(20, 180)
        s = alpha[random.randint(0, 30):][:l] + b"\n"
        parts.append(s)
        n += len(s)
    with open(os.path.join(out, f"lines-{i}.txt"), "wb") as f:
        f.write(b"".join(parts))
    block = random.randbytes(1 << 16)
    with open(os.path.join(out, f"fixed-{i}.bin"), "wb") as f:
        for _ in range(per // len(block)):
            f.write(block)
