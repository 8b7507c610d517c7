"""What each task of a tf-yarn PyTorch experiment runs (tf-yarn's
tf_yarn/pytorch/tasks/worker.py, on loom's environment)."""
import importlib
import os
import tempfile
import time
from typing import Any, Callable, Dict, Optional

PYTORCH_DPP_RANK = "PYTORCH_DPP_RANK"


class _MetricsWriter:
    """tb_writer without TensorBoard: add_scalar reports a loom metric."""

    def __init__(self) -> None:
        import loom
        self._loom = loom.Loom()

    def add_scalar(self, tag: str, scalar_value: Any, global_step: Optional[int] = None,
                   *args: Any, **kw: Any) -> None:
        self._loom.metric(tag, int(global_step or 0), float(scalar_value))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _writer(tmp: str) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return _MetricsWriter()
    return SummaryWriter(tmp)


def _loader(dataset: Any, a: Any) -> Any:
    import torch
    from torch.utils.data.distributed import DistributedSampler
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    sampler: Any = None if iterable else DistributedSampler(dataset, shuffle=a.shuffle)
    kw: Dict[str, Any] = dict(sampler=sampler, batch_size=a.batch_size,
                              num_workers=a.num_workers, pin_memory=a.pin_memory,
                              drop_last=a.drop_last, timeout=a.timeout,
                              collate_fn=a.collate_fn)
    if a.num_workers > 0:  # torch refuses both with no worker processes
        kw.update(prefetch_factor=a.prefetch_factor, persistent_workers=a.persistent_workers)
    return torch.utils.data.DataLoader(dataset, **kw)


def _upload(local: str, url: str) -> None:
    from ...._find import fs
    from ....errors import FsError
    try:
        fs("mkdir", url, check=True)
        for f in sorted(os.listdir(local)):
            fs("put", "-f", os.path.join(local, f), f"{url}/{f}", check=True)
    except FsError as e:
        raise OSError(f"tensorboard_hdfs_dir: {e}") from None


def task(experiment_fn: Callable[[], Any], custom_task_module: Optional[str]) -> Any:
    """One task: custom_task_module's main(), or the experiment trained."""
    t0 = time.monotonic()
    if custom_task_module:
        return importlib.import_module(custom_task_module).main()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import loom.torch as lt
    from .experiment import PytorchExperiment
    exp = experiment_fn()
    if not isinstance(exp, PytorchExperiment):
        raise TypeError(f"experiment_fn returned a {type(exp).__name__}, not a "
                        "PytorchExperiment")
    if exp.n_workers_per_executor != 1:
        raise ValueError(f"PytorchExperiment.n_workers_per_executor="
                         f"{exp.n_workers_per_executor}: loom.compat runs one worker per task; "
                         "give the role more instances")
    rank, _ = lt.init()
    os.environ[PYTORCH_DPP_RANK] = str(rank)
    gpu = dist.get_backend() == "nccl"
    device = f"cuda:{torch.cuda.current_device()}" if gpu else "cpu"
    model = exp.model.to(device)
    ddp = DDP(model, device_ids=[torch.cuda.current_device()] if gpu else None,
              **(exp.ddp_args._asdict() if exp.ddp_args else {}))
    loader = _loader(exp.train_dataset, exp.dataloader_args)
    t1 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tb = _writer(tmp)
        exp.main_fn(ddp, loader, device, rank, tb)
        tb.flush()
        tb.close()
        train_s = time.monotonic() - t1
        if exp.tensorboard_hdfs_dir and os.listdir(tmp):
            _upload(tmp, f"{exp.tensorboard_hdfs_dir.rstrip('/')}/worker{rank}")
    dist.destroy_process_group()
    return {"rank": rank, "container_s": time.monotonic() - t0, "train_s": train_s}
