"""loom.torch: PyTorch in a loom task, thinly.

    import loom.torch
    loom.torch.init()                        # the process group, from loom's variables
    ds = loom.torch.FeedDataset(shape=(785,))
    loader = torch.utils.data.DataLoader(ds, batch_size=64)
    for batch in loader: ...                # every epoch the feed has (ds.epoch)

init() sets up torch.distributed from what loom gives every process of a
training role (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, as
torchrun sets them): NCCL where the process sees a GPU, else Gloo.
FeedDataset is an IterableDataset over the task's data feed, every epoch
in one pass, the feed deciding which records each task reads (its splits
go to whichever task asks), so there is no sampler and no sharding to set
up; after the feed's end a pass yields nothing. Importing this module imports torch."""
import datetime
import os
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from .feed import END, EPOCH, Feed

__all__ = ["init", "FeedDataset"]

_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def _gpu() -> bool:
    return torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


def init(backend: Optional[str] = None, timeout: Optional[float] = None) -> Tuple[int, int]:
    """torch.distributed's default process group from loom's variables
    (env://); backend None: "nccl" where this process sees a GPU (its
    device: LOCAL_RANK among those CUDA_VISIBLE_DEVICES leaves), else
    "gloo". timeout: seconds for the group's operations (torch's default
    when None). Returns (rank, world size). Already initialized: returns
    its rank and size and changes nothing. A process of a role that does
    not train (ps, evaluator, tensorboard: loom gives them no rank) is a
    RuntimeError that says so."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    missing = [v for v in _VARS if not os.environ.get(v)]
    if missing:
        role = os.environ.get("LOOM_ROLE")
        where = (f"the role {role!r} does not train (loom gives ranks to chief and worker)"
                 if role else "this is not a task of a loom job")
        raise RuntimeError(f"loom.torch.init: {', '.join(missing)} not set: {where}")
    if backend is None:
        backend = "nccl" if _gpu() else "gloo"
    if backend == "nccl":
        n = torch.cuda.device_count()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % max(n, 1))
    kw: Any = {}
    if timeout is not None:
        kw["timeout"] = datetime.timedelta(seconds=timeout)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, **kw)
    return rank, world


class FeedDataset(IterableDataset):
    """The task's data feed as an IterableDataset: a pass (iter()) yields
    this task's records of every epoch of the feed, to its end (.epoch
    says which epoch the last record was of), and a later pass nothing (a
    pass left early is finished by the next). Each task reads what the
    feed gives it, so tasks read different numbers of records: a
    collective inside the loop (DDP's gradient all_reduce) needs torch's
    Join for uneven inputs, or average the models once every task is at
    the end, as examples/feed-torch does. A pass that stopped at each
    epoch would hang there: a task that has met the next epoch may hold
    its splits while the others wait for them. A record becomes transform(record bytes) when transform is
    given, else a tensor of dtype (a torch dtype or its name) of the
    record's bytes, shaped shape when given (a record of another size is a
    ValueError). The DataLoader must read it in this process
    (num_workers=0, its default): the feed is one stream per task, and it
    already divides the data between tasks."""

    def __init__(self, shape: Optional[Union[int, Sequence[int]]] = None,
                 dtype: Union[str, "torch.dtype"] = "uint8",
                 transform: Optional[Callable[[bytes], Any]] = None, batch: int = 256) -> None:
        super().__init__()
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape) if shape else None
        self.transform = transform
        self.batch = batch
        self._feed: Optional[Feed] = None
        self._over = False
        self._epoch = 0

    def _tensor(self, rec: bytes) -> Any:
        if self.transform is not None:
            return self.transform(rec)
        t = torch.frombuffer(bytearray(rec), dtype=self.dtype)
        if self.shape is not None:
            try:
                t = t.reshape(self.shape)
            except RuntimeError:
                raise ValueError(f"loom.torch.FeedDataset: a record of {len(rec)} bytes is "
                                 f"not {self.shape} of {self.dtype}") from None
        return t

    def __iter__(self) -> Iterator[Any]:
        if get_worker_info() is not None:
            raise RuntimeError("loom.torch.FeedDataset is read in the task's own process: give "
                               "the DataLoader num_workers=0 (the feed already divides the data "
                               "between tasks, and libloom reads ahead on a thread of its own)")
        if self._over:
            return
        if self._feed is None:
            self._feed = Feed()
        while True:
            b = self._feed.batch(self.batch)
            if b is END:
                self.close()
                self._over = True
                return
            if b is EPOCH:  # the next epoch's records follow in the same pass
                continue
            assert isinstance(b, list)
            self._epoch = int(self._feed.epoch)
            for rec in b:
                yield self._tensor(rec)

    @property
    def epoch(self) -> int:
        """The feed's epoch of the last record read, from 0."""
        return self._epoch

    def close(self) -> None:
        """Closes the feed (what it has not finished goes back to it)."""
        if self._feed is not None:
            self._feed.close()
            self._feed = None
