"""tf-yarn's PytorchExperiment and its arguments."""
from typing import Any, Callable, NamedTuple, Optional


class DataLoaderArgs(NamedTuple):
    batch_size: Optional[int] = 1
    num_workers: int = 0
    pin_memory: bool = False
    drop_last: bool = False
    timeout: float = 0
    prefetch_factor: int = 2
    shuffle: bool = False
    collate_fn: Optional[Callable[..., Any]] = None
    persistent_workers: bool = False


class DistributedDataParallelArgs(NamedTuple):
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    gradient_as_bucket_view: bool = False


class PytorchExperiment(NamedTuple):
    """model, main_fn(ddp_model, trainloader, device, rank, tb_writer), the
    training set and its DataLoader's arguments."""
    model: Any
    main_fn: Callable[..., Any]
    train_dataset: Any
    dataloader_args: DataLoaderArgs
    n_workers_per_executor: int = 1
    tensorboard_hdfs_dir: Optional[str] = None
    ddp_args: Optional[DistributedDataParallelArgs] = None
