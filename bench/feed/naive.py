"""naive.py: what a Python program does without a feed: reads the files
itself, a record at a time (for line in file; file.read(N)). Prints
"records=N bytes=B seconds=S cpu=C".   python3 naive.py lines|fixed:N FILE..."""
import sys
import resource
import time

fmt, files = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


c0 = cpu()
n = b = 0
for p in files:
    with open(p, "rb") as f:
        if fmt == "lines":
            for line in f:
                n += 1
                b += len(line)
        else:
            rec = int(fmt.split(":")[1])
            read = f.read
            while True:
                r = read(rec)
                if not r:
                    break
                n += 1
                b += len(r)
print(f"records={n} bytes={b} seconds={time.perf_counter() - t0:.6f} cpu={cpu() - c0:.6f}")
