"""The job's data feed from Python (include/loom/feed.h over ctypes).

    feed = Feed()                          # or Feed(loom_handle)
    for rec in feed: ...                   # bytes, all records of all epochs
    rec = feed.next()                      # bytes, EPOCH, or END (None)
    recs = feed.batch(1024)                # list of bytes (one split at most)
    data, offs = feed.read_view(1024)      # memoryviews of the batch and its
                                           # k + 1 offsets: the fastest
    x = feed.array_batch(64, (785,), np.uint8)   # fixed-size records as a
                                           # numpy array, one C call a batch
    feed.write(b"result\\n")                # output for the last record's split
    feed.close()

Which to use: read_view() when the records can be used where they lie (a
parser, a tokenizer or numpy taking a buffer and offsets), array_batch()
for fixed-size records into numpy, batch() for a list of bytes objects
(one C call and one marshal.loads a batch: about as fast as Python
reading the files itself), next() and iteration for a record at a time (a
C call each). Records are copied out of the reader's buffers (next_view()
and read_view() give memoryviews without a copy, valid until the next
read). Reading happens ahead on libloom's own thread, outside the GIL, so
it overlaps with Python's compute. Exactly-once output: a split's output
is committed when the reader moves past the split's last record; read to
the end (END) before closing. Not usable across fork(): open the feed in
the process that reads it (e.g. a DataLoader with num_workers=0)."""
import array
import ctypes
import itertools
import marshal
import struct
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ._lib import FeedStats, Record, check, lib
from .core import Loom

END = None


class _Epoch:
    """The type of EPOCH."""

    def __repr__(self) -> str:
        return "loom.EPOCH"


EPOCH = _Epoch()  # returned once when the next record begins a new epoch

_C_END, _C_EPOCH = 1, 2  # LOOM_FEED_END, LOOM_FEED_EPOCH
_LOOM_ERANGE = -11
_FRAME_SEP, _FRAME_LEN32 = 0x100, 0x200  # LOOM_FEED_FRAME_*

# batch() has libloom frame each record as <int32 size><bytes>"s" after a
# 6-byte head "[" <int32 count> "s" of its own: marshal's layout of a list
# of bytes (TYPE_LIST, TYPE_STRING; the "s" after a record is the next
# one's type, the last is ignored), which marshal.loads turns into the
# list in one C loop, reading the buffer in place. Checked once, in case a
# Python ever reads these differently; batch() then cuts by the offsets.
_HEAD = 6
_MARSHAL_FRAME = _FRAME_LEN32 | _FRAME_SEP | ord("s")


def _marshal_reads_frames():
    try:
        return marshal.loads(b"[\x02\x00\x00\x00s\x01\x00\x00\x00as\x00\x00\x00\x00s") == \
            [b"a", b""]
    except Exception:
        return False


_MARSHAL = _marshal_reads_frames()


class Feed:
    def __init__(self, loom: Optional[Loom] = None) -> None:
        """Opens the job's feed on loom (a Loom of its own when None)."""
        self._own = loom is None
        self.loom = Loom() if loom is None else loom
        h = ctypes.c_void_p()
        check(lib.loom_feed_open(self.loom.handle, ctypes.byref(h)), self.loom.handle)
        self._f: Optional[ctypes.c_void_p] = h
        self._rec = Record()
        self._n = ctypes.c_size_t()
        # buffers made on first use (bytearray, array, numpy): typed Any
        self._buf: Any = None
        self._cbuf: Any = None
        self._sizes: Any = None
        self._csizes: Any = None
        self._np_sizes: Any = None
        self._np_sizes_p: Any = None
        self._offs: Any = None  # read_offsets' n + 1 offsets (uint64)
        self._coffs: Any = None
        self._nref = ctypes.byref(self._n)
        self._marshal = _MARSHAL  # batch() by marshal.loads, else by the offsets

    # -- reading ---------------------------------------------------------------
    def _status(self, rc):
        if rc == _C_END:
            return END
        if rc == _C_EPOCH:
            return EPOCH
        check(rc, self.loom.handle)
        return 0

    def next_view(self) -> Union[memoryview, _Epoch, None]:
        """The next record as a memoryview valid until the next read, or
        EPOCH, or END (None)."""
        rc = lib.loom_feed_next(self._live(), ctypes.byref(self._rec))
        if rc:
            return self._status(rc)
        r = self._rec
        return memoryview((ctypes.c_char * r.size).from_address(r.data)) if r.size else \
            memoryview(b"")

    def next(self) -> Union[bytes, _Epoch, None]:
        """The next record as bytes, or EPOCH, or END (None)."""
        rc = lib.loom_feed_next(self._live(), ctypes.byref(self._rec))
        if rc:
            return self._status(rc)
        return ctypes.string_at(self._rec.data, self._rec.size)

    def batch(self, n: int) -> Union[List[bytes], _Epoch, None]:
        """Up to n records (bytes) of one split, or EPOCH, or END (None).
        One C call copies the batch out, each record framed by its size,
        and one marshal.loads makes the list from that buffer in one C loop
        (records may hold any bytes)."""
        if self._marshal:
            k = self._fill(n, 1 << 20, _MARSHAL_FRAME, _HEAD)
            if k.__class__ is not int:
                return k
            buf = self._buf
            if len(buf) <= 1 << 31:  # else a record may be past marshal's int32 sizes
                struct.pack_into("<BiB", buf, 0, 0x5B, k, 0x73)  # "[" k "s"
                return marshal.loads(buf)  # reads the k records, not past them
            return self._cut(bytes(memoryview(buf)[_HEAD:_HEAD + self._offs[k]]), k, 4, 1)
        k = self._fill(n, 1 << 20, 0, 0)
        if k.__class__ is not int:
            return k
        return self._cut(bytes(memoryview(self._buf)[:self._offs[k]]), k, 0, 0)

    def _cut(self, data, k, pre, post):
        """The k records in data as a list of bytes, by self._offs (frames
        of pre bytes before each record and post after)."""
        offs = self._offs
        starts = map(pre.__add__, offs[:k]) if pre else offs[:k]
        ends = map((-post).__add__, offs[1:k + 1]) if post else offs[1:k + 1]
        return list(map(data.__getitem__, map(slice, starts, ends)))

    def read_view(self, n: int, max_bytes: int = 1 << 20
                  ) -> Union[Tuple[memoryview, memoryview], _Epoch, None]:
        """Up to n records (of one split) copied back to back in one call,
        and handed over without another copy: (data, offsets), read-only
        memoryviews valid until the next read (of any kind) or close:
        data the bytes (format "B"), offsets k + 1 uint64 (format "Q"),
        record i being data[offsets[i]:offsets[i + 1]]. Or EPOCH, or END
        (None). For numpy: np.frombuffer(data, np.uint8) and
        np.frombuffer(offsets, np.uint64), no copy. A record larger than
        max_bytes grows the buffer."""
        k = self._fill(n, max_bytes, 0, 0)
        if k.__class__ is not int:
            return k
        return (memoryview(self._buf)[:self._offs[k]].toreadonly(),
                memoryview(self._offs)[:k + 1].toreadonly())

    def _fill(self, n, max_bytes, frame, at):
        """One loom_feed_read_offsets call (frame: LOOM_FEED_FRAME_* bits)
        into self._buf from byte at on, offsets into self._offs (from at):
        the number of records, or EPOCH, or END."""
        if self._offs is None or len(self._offs) <= n:
            self._coffs = None
            self._offs = array.array("Q", bytes(8 * (n + 1)))
            self._coffs = (ctypes.c_size_t * (n + 1)).from_buffer(self._offs)
        while True:
            if self._buf is None or len(self._buf) < max_bytes:
                self._grow(max_bytes)
            rc = lib.loom_feed_read_offsets(self._live(), self._addr + at, len(self._buf) - at,
                                            self._coffs, n, frame, self._nref)
            if not rc:
                return self._n.value
            if rc == _LOOM_ERANGE:  # the next record is larger than the buffer
                max_bytes = max(self._offs[0] + at, 2 * len(self._buf))
                continue
            return self._status(rc)

    def _grow(self, size):
        # a new buffer, never a resized one: views handed out keep the old alive
        self._cbuf = None
        self._buf = bytearray(size)
        self._cbuf = (ctypes.c_char * size).from_buffer(self._buf)
        self._addr = ctypes.addressof(self._cbuf)

    def read(self, n: int, max_bytes: int = 1 << 20
             ) -> Union[Tuple[bytes, List[int]], _Epoch, None]:
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
                self._grow(max_bytes)
            rc = lib.loom_feed_read(self._live(), self._cbuf, len(self._buf), self._csizes, n,
                                    self._nref)
            if rc == _LOOM_ERANGE:  # the next record is larger than the buffer
                max_bytes = max(self._sizes[0], 2 * len(self._buf))
                continue
            if rc:
                return self._status(rc)
            sizes = self._sizes[:self._n.value].tolist()
            return bytes(memoryview(self._buf)[:sum(sizes)]), sizes

    def array_batch(self, n: int, shape: Union[int, Tuple[int, ...]], dtype: Any = "uint8",
                    out: Any = None) -> Any:
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

    def __iter__(self) -> Iterator[bytes]:
        """Every record (bytes) of every epoch; epoch boundaries are skipped
        (see .epoch). Reads batch() by batch() (256 records, one split at
        most) and hands the records over one at a time: the next batch is
        read only once the loop body has had every record of this one, so
        write() still lands with the split of the record in hand and a
        split is committed only after its last record was processed."""
        return itertools.chain.from_iterable(self.batches(256))  # a C loop a record

    def batches(self, n: int) -> Iterator[List[bytes]]:
        """Lists of up to n records, epoch boundaries skipped."""
        while True:
            b = self.batch(n)
            if b is END:
                return
            if isinstance(b, list):  # else EPOCH: skipped
                yield b

    # -- output and state ------------------------------------------------------
    def write(self, data: Union[bytes, bytearray, memoryview, str]) -> None:
        """Appends bytes to the output of the last record's split."""
        if isinstance(data, str):
            data = data.encode()
        b = bytes(data)
        check(lib.loom_feed_write(self._live(), b, len(b)), self.loom.handle)

    epoch = property(lambda self: lib.loom_feed_epoch(self._live()))
    epochs = property(lambda self: lib.loom_feed_epochs(self._live()))
    split = property(lambda self: lib.loom_feed_split(self._live()))
    splits = property(lambda self: lib.loom_feed_splits(self._live()))

    def stats(self) -> Dict[str, float]:
        """loom_feed_get_stats: records, bytes, splits, stale; wait_s (seconds waited)."""
        s = FeedStats()
        lib.loom_feed_get_stats(self._live(), ctypes.byref(s))
        return {"records": s.records, "bytes": s.bytes, "splits": s.splits,
                "stale": s.stale, "wait_s": s.wait_ns / 1e9}

    def _live(self):
        if not self._f:
            raise ValueError("the feed is closed")
        return self._f

    def close(self) -> None:
        """Gives back unfinished splits and closes; closes the loom handle
        too when the feed opened it."""
        if self._f:
            rc = lib.loom_feed_close(self._f)
            self._f = None
            if self._own:
                self.loom.close()
            check(rc)

    def __enter__(self) -> "Feed":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
