"""A running peer learns a restarted task's new address: waits (through
libloom, by ctypes) until loom/cluster_version reaches argv[1], then prints
loom/cluster."""
import ctypes
import os
import sys

lib = ctypes.CDLL(os.environ["LOOM_LIB"])
h = ctypes.c_void_p()
assert lib.loom_init(ctypes.byref(h)) == 0
lib.loom_kv_get.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
want = int(sys.argv[1])


def get(key, timeout_ms):
    v, n = ctypes.c_void_p(), ctypes.c_size_t()
    rc = lib.loom_kv_get(h, key.encode(), timeout_ms, ctypes.byref(v), ctypes.byref(n))
    return ctypes.string_at(v, n.value).decode() if rc == 0 else None


while int(get("loom/cluster_version", 30000) or 0) < want:
    import time
    time.sleep(0.1)
print("CLUSTER", get("loom/cluster", 1000), flush=True)
lib.loom_finish(h)
