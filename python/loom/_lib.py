"""Loading libloom.so and declaring the C functions the package calls.

Imported on first use of loom.Loom or loom.Feed (not by `import loom`, so
the command-line half of the package works without the library). The
library is found as loom._find.library() says: $LOOM_LIBRARY, the build/
directory of the source tree this package sits in or was installed from
(python/loom/ -> build/libloom.so), an install prefix, or wherever the
dynamic loader finds libloom."""
import ctypes

from ._find import library
from .errors import LoomError

c_int, c_long, c_size_t, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_long, ctypes.c_size_t,
                                               ctypes.c_char_p, ctypes.c_void_p)
P = ctypes.POINTER

lib = ctypes.CDLL(library())


class Record(ctypes.Structure):
    """loom_record: a view of size bytes at data."""
    _fields_ = [("data", c_void_p), ("size", c_size_t)]


class FeedStats(ctypes.Structure):
    _fields_ = [("records", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("splits", ctypes.c_uint64), ("stale", ctypes.c_uint64),
                ("wait_ns", ctypes.c_uint64)]


def _decl(name, restype, *argtypes):
    f = getattr(lib, name, None)
    if f is not None:
        f.restype = restype
        f.argtypes = list(argtypes)
    return f


_decl("loom_strerror", c_char_p, c_int)
_decl("loom_err_name", c_char_p, c_int)
_decl("loom_init", c_int, P(c_void_p))
_decl("loom_finish", None, c_void_p)
_decl("loom_errmsg", c_char_p, c_void_p)
for _n in ("loom_rank", "loom_world_size", "loom_local_rank", "loom_local_size", "loom_index",
           "loom_attempt"):
    _decl(_n, c_int, c_void_p)
_decl("loom_role", c_char_p, c_void_p)
_decl("loom_job_id", c_char_p, c_void_p)
_decl("loom_kv_set", c_int, c_void_p, c_char_p, c_void_p, c_size_t)
_decl("loom_kv_get", c_int, c_void_p, c_char_p, c_int, P(c_void_p), P(c_size_t))
_decl("loom_kv_add", c_int, c_void_p, c_char_p, ctypes.c_int64, P(ctypes.c_int64))
_decl("loom_event", c_int, c_void_p, c_char_p, c_char_p)
_decl("loom_metric", c_int, c_void_p, c_char_p, ctypes.c_int64, ctypes.c_double)
_decl("loom_phase_times_get", c_int, c_void_p, ctypes.c_void_p)
_decl("loom_feed_open", c_int, c_void_p, P(c_void_p))
_decl("loom_feed_next", c_int, c_void_p, P(Record))
_decl("loom_feed_next_batch", c_int, c_void_p, P(Record), c_size_t, P(c_size_t))
_decl("loom_feed_read", c_int, c_void_p, c_void_p, c_size_t, P(c_size_t), c_size_t, P(c_size_t))
_decl("loom_feed_read_offsets", c_int, c_void_p, c_void_p, c_size_t, P(c_size_t), c_size_t,
      ctypes.c_uint, P(c_size_t))
_decl("loom_feed_epoch", c_int, c_void_p)
_decl("loom_feed_epochs", c_int, c_void_p)
_decl("loom_feed_split", c_long, c_void_p)
_decl("loom_feed_splits", c_long, c_void_p)
_decl("loom_feed_write", c_int, c_void_p, c_void_p, c_size_t)
_decl("loom_feed_get_stats", None, c_void_p, P(FeedStats))
_decl("loom_feed_close", c_int, c_void_p)

libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None


def check(rc, handle=None):
    """Raises LoomError for a negative return code; returns rc otherwise."""
    if rc < 0:
        msg = lib.loom_errmsg(handle).decode(errors="replace") if handle else ""
        raise LoomError(rc, msg)
    return rc
