"""A training stand-in for the dashboard tests: reports the metric "loss"
= (1 + LOOM_INDEX/2)/(step+1) through libloom's loom_metric() (by ctypes,
the library named by LOOM_LIB) for argv[1] steps, one every argv[2]
seconds (a quarter of it busy, so the agents see some CPU use), and prints
a log line a step."""
import ctypes
import os
import sys
import time

lib = ctypes.CDLL(os.environ["LOOM_LIB"])
lib.loom_init.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
lib.loom_metric.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_double]
lib.loom_finish.argtypes = [ctypes.c_void_p]
h = ctypes.c_void_p()
assert lib.loom_init(ctypes.byref(h)) == 0
steps, every = int(sys.argv[1]), float(sys.argv[2])
scale = 1 + int(os.environ["LOOM_INDEX"]) / 2
for step in range(steps):
    loss = scale / (step + 1)
    assert lib.loom_metric(h, b"loss", step, loss) == 0
    print(f"step {step} loss {loss:.4f}", flush=True)
    t0 = time.time()
    while time.time() - t0 < every / 4:
        pass
    time.sleep(every * 3 / 4)
lib.loom_finish(h)
