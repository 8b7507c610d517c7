"""The job's data feed from Python (include/loom/feed.h over ctypes).

    feed = Feed()                          # or Feed(loom_handle)
    for rec in feed: ...                   # bytes, all records of all epochs
    rec = feed.next()                      # bytes, EPOCH, or END (None)
    recs = feed.batch(64)                  # list of bytes (one split at most)
    x = feed.array_batch(64, (785,), np.uint8)   # fixed-size records as a
                                           # numpy array, one C call a batch
    feed.write(b"result\\n")                # output for the last record's split
    feed.close()

Records are copied out of the reader's buffers (next_view() gives a
memoryview without a copy, valid until the next read). Reading happens
ahead on libloom's own thread, outside the GIL, so it overlaps with
Python's compute. Exactly-once output: a split's output is committed when
the reader moves past the split's last record; read to the end (END)
before closing. Not usable across fork(): open the feed in the process
that reads it (e.g. a DataLoader with num_workers=0)."""
import array
import ctypes
import itertools

from ._lib import FeedStats, Record, check, lib
from .core import Loom

END = None


class _Epoch:
    def __repr__(self):
        return "loom.EPOCH"


EPOCH = _Epoch()  # returned once when the next record begins a new epoch

_C_END, _C_EPOCH = 1, 2  # LOOM_FEED_END, LOOM_FEED_EPOCH
_LOOM_ERANGE = -11


class Feed:
    def __init__(self, loom=None):
        self._own = loom is None
        self.loom = Loom() if loom is None else loom
        h = ctypes.c_void_p()
        check(lib.loom_feed_open(self.loom.handle, ctypes.byref(h)), self.loom.handle)
        self._f = h
        self._rec = Record()
        self._n = ctypes.c_size_t()
        self._buf = self._cbuf = None
        self._sizes = self._csizes = None
        self._np_sizes = self._np_sizes_p = None

    # -- reading ---------------------------------------------------------------
    def _status(self, rc):
        if rc == _C_END:
            return END
        if rc == _C_EPOCH:
            return EPOCH
        check(rc, self.loom.handle)
        return 0

    def next_view(self):
        """The next record as a memoryview valid until the next read, or
        EPOCH, or END (None)."""
        rc = lib.loom_feed_next(self._live(), ctypes.byref(self._rec))
        if rc:
            return self._status(rc)
        r = self._rec
        return memoryview((ctypes.c_char * r.size).from_address(r.data)) if r.size else \
            memoryview(b"")

    def next(self):
        """The next record as bytes, or EPOCH, or END (None)."""
        rc = lib.loom_feed_next(self._live(), ctypes.byref(self._rec))
        if rc:
            return self._status(rc)
        return ctypes.string_at(self._rec.data, self._rec.size)

    def batch(self, n):
        """Up to n records (bytes) of one split, or EPOCH, or END (None).
        One C call a batch: the records are copied out together, then cut."""
        got = self._read(n, 1 << 20)
        if not isinstance(got, tuple):
            return got
        data, sizes = got
        ends = list(itertools.accumulate(sizes))  # cut in C loops, not Python ones
        return list(map(data.__getitem__, map(slice, itertools.chain((0,), ends), ends)))

    def read(self, n, max_bytes=1 << 20):
        """Up to n records (of one split) copied back to back in one call:
        (data, sizes), a bytes object and a list of ints, or EPOCH, or END
        (None). A record larger than max_bytes grows the buffer."""
        return self._read(n, max_bytes)

    def _read(self, n, max_bytes):
        if self._sizes is None or len(self._sizes) < n:
            self._sizes = array.array("Q", bytes(8 * n))
            self._csizes = (ctypes.c_size_t * n).from_buffer(self._sizes)
        while True:
            if self._buf is None or len(self._buf) < max_bytes:
                self._cbuf = None
                self._buf = bytearray(max_bytes)
                self._cbuf = (ctypes.c_char * max_bytes).from_buffer(self._buf)
            rc = lib.loom_feed_read(self._live(), self._cbuf, len(self._buf), self._csizes, n,
                                    ctypes.byref(self._n))
            if rc == _LOOM_ERANGE:  # the next record is larger than the buffer
                max_bytes = max(self._sizes[0], 2 * len(self._buf))
                continue
            if rc:
                return self._status(rc)
            sizes = self._sizes[:self._n.value].tolist()
            return bytes(memoryview(self._buf)[:sum(sizes)]), sizes

    def array_batch(self, n, shape, dtype="uint8", out=None):
        """Up to n fixed-size records as a numpy array of shape (k, *shape)
        of dtype (each record must be exactly that many bytes), or EPOCH,
        or END (None). One C call and one copy a batch. With out (a
        C-contiguous array of shape (n, *shape) and that dtype, reused from
        call to call), the records land there and out[:k] is returned: no
        allocation a batch."""
        import numpy as np
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if out is None:
            out = np.empty((n,) + shape, dtype=np.dtype(dtype))
        elif (out.shape != (n,) + shape or out.dtype != np.dtype(dtype) or
              not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(f"out must be a writable C-contiguous {(n,) + shape} array of "
                             f"{np.dtype(dtype)}")
        rec_bytes = out.nbytes // n if n else 0
        if self._np_sizes is None or len(self._np_sizes) < n:
            self._np_sizes = np.empty(n, dtype=np.uint64)
            self._np_sizes_p = self._np_sizes.ctypes.data_as(ctypes.POINTER(ctypes.c_size_t))
        sizes = self._np_sizes
        rc = lib.loom_feed_read(self._live(), out.ctypes.data, out.nbytes, self._np_sizes_p, n,
                                ctypes.byref(self._n))
        if rc == _LOOM_ERANGE:
            raise ValueError(f"a record of {sizes[0]} bytes is larger than {rec_bytes}")
        if rc:
            return self._status(rc)
        k = self._n.value
        bad = sizes[:k] != rec_bytes
        if bad.any():
            raise ValueError(f"a record of {int(sizes[:k][bad][0])} bytes, not {rec_bytes} "
                             f"({shape} of {out.dtype}): use read() for records of varying size")
        return out[:k]

    def __iter__(self):
        """Every record (bytes) of every epoch; epoch boundaries are skipped
        (see .epoch)."""
        while True:
            r = self.next()
            if r is END:
                return
            if r is EPOCH:
                continue
            yield r

    def batches(self, n):
        """Lists of up to n records, epoch boundaries skipped."""
        while True:
            b = self.batch(n)
            if b is END:
                return
            if b is EPOCH:
                continue
            yield b

    # -- output and state ------------------------------------------------------
    def write(self, data):
        """Appends bytes to the output of the last record's split."""
        if isinstance(data, str):
            data = data.encode()
        b = bytes(data)
        check(lib.loom_feed_write(self._live(), b, len(b)), self.loom.handle)

    epoch = property(lambda self: lib.loom_feed_epoch(self._live()))
    epochs = property(lambda self: lib.loom_feed_epochs(self._live()))
    split = property(lambda self: lib.loom_feed_split(self._live()))
    splits = property(lambda self: lib.loom_feed_splits(self._live()))

    def stats(self):
        s = FeedStats()
        lib.loom_feed_get_stats(self._live(), ctypes.byref(s))
        return {"records": s.records, "bytes": s.bytes, "splits": s.splits,
                "stale": s.stale, "wait_s": s.wait_ns / 1e9}

    def _live(self):
        if not self._f:
            raise ValueError("the feed is closed")
        return self._f

    def close(self):
        """Gives back unfinished splits and closes; closes the loom handle
        too when the feed opened it."""
        if self._f:
            rc = lib.loom_feed_close(self._f)
            self._f = None
            if self._own:
                self.loom.close()
            check(rc)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
