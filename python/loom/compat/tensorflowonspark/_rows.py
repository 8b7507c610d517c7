"""The rows of a TensorFlowOnSpark program's RDD, through loom's feed and
back: loom.spark.train flattens each row (nested lists, tuples, numpy
arrays) into a fixed-width record of its numbers (a bool a byte, an int a
little-endian int64, a float a float64: loom._spill._as_df); a Layout,
taken from the RDD's first row on the driver, turns records back into rows
of the same nesting in the task (TFNode.DataFeed.next_batch)."""
from typing import Any, Iterator, List, Tuple, Union

Template = Union[str, Tuple[Any, ...]]
_KIND = {"b": "?", "i": "<i8", "f": "<f8"}


def _leaf(v: Any) -> str:
    return "b" if isinstance(v, bool) else "i" if isinstance(v, int) else "f"


def _template(v: Any) -> Template:
    """v's nesting: "b"/"i"/"f" for a number, ("l"|"t", children) for a
    list or tuple, ("a", shape, dtype, kinds) for a numpy array, ("s",
    dtype, kind) for a numpy scalar."""
    if isinstance(v, (bool, int, float)):
        return _leaf(v)
    if hasattr(v, "tolist") and hasattr(v, "dtype"):
        vals = v.tolist()
        if getattr(v, "ndim", 0) == 0:
            return ("s", v.dtype.str, _leaf(vals))
        flat = _flatten(vals)
        return ("a", tuple(v.shape), v.dtype.str, len(flat))
    if isinstance(v, (list, tuple)):
        return ("l" if isinstance(v, list) else "t", tuple(_template(x) for x in v))
    raise TypeError(f"loom.compat.tensorflowonspark: an RDD row holds a {type(v).__name__}: "
                    "rows of numbers (nested lists, tuples, numpy arrays) or of bytes go "
                    "through loom's feed")


def _flatten(v: Any) -> List[Any]:
    if isinstance(v, list):
        return [y for x in v for y in _flatten(x)]
    return [v]


def _build(t: Template, it: Iterator[Any]) -> Any:
    if isinstance(t, str):
        return next(it)
    tag = t[0]
    if tag == "l":
        return [_build(c, it) for c in t[1]]
    if tag == "t":
        return tuple(_build(c, it) for c in t[1])
    import numpy as np
    if tag == "a":
        return np.array([next(it) for _ in range(t[3])], dtype=t[2]).reshape(t[1])
    return np.dtype(t[1]).type(next(it))


class Layout:
    """How records of one RDD become its rows again (picklable: it goes to
    the tasks with map_fun)."""

    def __init__(self, first: Any) -> None:
        from ..._spill import _flat
        self.raw = isinstance(first, (bytes, bytearray))
        self.template: Template = "raw" if self.raw else _template(first)
        self.kinds = [] if self.raw else [_leaf(v) for v in _flat(first)]
        t = self.template
        # the rows TensorFlowOnSpark's examples feed: a flat list of numbers
        self.flat_list = (isinstance(t, tuple) and t[0] == "l"
                          and all(isinstance(c, str) for c in t[1]))

    def rows(self, data: memoryview, offsets: memoryview) -> List[Any]:
        """The rows of the records of one read (loom.Feed.read_view)."""
        import numpy as np
        if self.raw:
            offs = np.frombuffer(offsets, np.uint64).tolist()
            return [bytes(data[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)]
        if len(set(self.kinds)) == 1:
            a = np.frombuffer(data, _KIND[self.kinds[0]]).reshape(-1, len(self.kinds))
        else:
            a = np.frombuffer(data, np.dtype([(f"_{i}", _KIND[k])
                                              for i, k in enumerate(self.kinds)]))
        vals = a.tolist()
        if self.flat_list:
            return [list(v) for v in vals]
        return [_build(self.template, iter(v)) for v in vals]
