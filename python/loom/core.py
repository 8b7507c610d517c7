"""The libloom handle: identity, the coordinator's KV store, events and
metrics."""
import ctypes
import json
import math
from typing import Any, Dict, Optional

from ._lib import check, lib, libc


class Loom:
    """One per process: connects to the job's coordinator from the task's
    environment (LOOM_COORD, LOOM_SECRET, ...). Raises LoomError
    (LOOM_ENOENV) outside a job. Close it (or use `with`) when done."""

    def __init__(self) -> None:
        h = ctypes.c_void_p()
        check(lib.loom_init(ctypes.byref(h)))
        self._h: Optional[ctypes.c_void_p] = h

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise ValueError("the loom handle is closed")
        return self._h

    def close(self) -> None:
        if self._h:
            lib.loom_finish(self._h)
            self._h = None

    def __enter__(self) -> "Loom":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def rank(self) -> int:
        return int(lib.loom_rank(self.handle))

    @property
    def world_size(self) -> int:
        return int(lib.loom_world_size(self.handle))

    @property
    def local_rank(self) -> int:
        return int(lib.loom_local_rank(self.handle))

    @property
    def index(self) -> int:
        return int(lib.loom_index(self.handle))

    @property
    def attempt(self) -> int:
        return int(lib.loom_attempt(self.handle))

    @property
    def role(self) -> str:
        return str(lib.loom_role(self.handle).decode())

    @property
    def job_id(self) -> str:
        return str(lib.loom_job_id(self.handle).decode())

    def kv_set(self, key: str, value: bytes) -> None:
        """Sets key to value in the job's KV store."""
        check(lib.loom_kv_set(self.handle, key.encode(), value, len(value)), self.handle)

    def kv_get(self, key: str, timeout_ms: int = -1) -> bytes:
        """key's value, waiting up to timeout_ms (-1: for ever) for it to be set."""
        val, n = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.loom_kv_get(self.handle, key.encode(), timeout_ms, ctypes.byref(val),
                              ctypes.byref(n)), self.handle)
        try:
            return ctypes.string_at(val, n.value)
        finally:
            libc.free(val)

    def kv_add(self, key: str, delta: int = 1) -> int:
        """Adds delta to the counter at key; its new value."""
        out = ctypes.c_int64()
        check(lib.loom_kv_add(self.handle, key.encode(), delta, ctypes.byref(out)), self.handle)
        return out.value

    def event(self, name: str, **detail: Any) -> None:
        """Records an event (events.jsonl) with detail as its JSON details."""
        d = json.dumps(detail).encode() if detail else None
        check(lib.loom_event(self.handle, name.encode(), d), self.handle)

    def metric(self, tag: str, step: int, value: float) -> None:
        """Records value at step under tag for this task (loom_metric): the
        job's dashboard charts each tag, a line per task, and keeps it in
        events.jsonl. tag is 1..128 bytes; value a finite number (NaN and
        infinities are refused: JSON has none). Does not wait for the
        coordinator, which keeps at most LOOM_METRIC_RATE (100) metrics per
        task and second over a 10 s burst; call it every few steps from a
        fast loop."""
        t = tag.encode()
        v = float(value)
        if not 1 <= len(t) <= 128:
            raise ValueError(f"metric tag must be 1..128 bytes, got {len(t)}: {tag!r}")
        if not math.isfinite(v):
            raise ValueError(f"metric {tag!r} at step {step}: {v} is not finite")
        check(lib.loom_metric(self.handle, t, int(step), v), self.handle)

    def phases(self) -> Dict[str, float]:
        """Where this process's time went since libloom first communicated
        or read the feed for it (loom_phase_times_get), in seconds: wall,
        compute (the rest), comm (inside collectives), wait_peers (waiting
        in them for slower ranks), wait_data (blocked on the feed). All
        zero before the first collective or feed read. The same shares
        reach the dashboard every LOOM_PHASE_MS as loom/time_*_pct metrics."""
        t = (ctypes.c_double * 5)()
        check(lib.loom_phase_times_get(self.handle, t), self.handle)
        return dict(zip(("wall", "compute", "comm", "wait_peers", "wait_data"), t))
