"""loom: Python bindings for libloom, the library a task of a loom job uses
to talk to its job (ctypes over libloom.so; no compiled extension).

    import loom
    l = loom.Loom()                 # from the task's environment (LOOM_*)
    with loom.Feed(l) as feed:      # the job's data feed (the spec's feed:)
        for rec in feed:            # bytes, every record of every epoch
            feed.write(predict(rec) + b"\\n")   # inference output, exactly once
    l.close()

See loom.feed for batches, numpy arrays and epochs."""
from ._lib import LoomError
from .core import Loom
from .feed import END, EPOCH, Feed

__all__ = ["Loom", "Feed", "LoomError", "END", "EPOCH"]
