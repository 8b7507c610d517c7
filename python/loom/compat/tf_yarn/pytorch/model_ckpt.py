"""tf-yarn's model checkpoints (model_<epoch>.pt in a local or hdfs://
directory): save_ckpt on rank 0, find_latest_ckpt, load_ckpt,
load_latest_ckpt. HDFS goes through `loom fs`."""
import os
import re
import tempfile
from typing import Any, Dict, Optional

from ...._find import fs, local_path as _local, remote as _remote
from .worker import PYTORCH_DPP_RANK


def _fs(*args: str) -> str:
    """`loom fs ARGS`' output (FsError, an OSError, on failure)."""
    return str(fs(*args, check=True).stdout)


def _unwrap(model: Any) -> Any:
    return getattr(model, "module", model)


def find_latest_ckpt(model_dir: str) -> Optional[str]:
    """The model_<epoch>.pt of the highest epoch in model_dir, or None."""
    if _remote(model_dir):
        r = fs("ls", model_dir)
        names = [l.split()[-1] for l in r.stdout.splitlines() if l.split()] \
            if r.returncode == 0 else []
    else:
        d = _local(model_dir)
        names = os.listdir(d) if os.path.isdir(d) else []
    best, epoch = None, -1
    for n in names:
        m = re.match(r".*model_(\d+)\.pt$", n)
        if m and int(m.group(1)) > epoch:
            epoch = int(m.group(1))
            best = f"{model_dir.rstrip('/')}/{os.path.basename(n)}"
    return best


def load_ckpt(model_ckpt_path: str, model: Any, optimizer: Any, device: Any) -> Dict[Any, Any]:
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        path = _local(model_ckpt_path)
        if _remote(model_ckpt_path):
            path = os.path.join(tmp, "model.pt")
            _fs("get", model_ckpt_path, path)
        checkpoint = torch.load(path, map_location=torch.device(device))
    _unwrap(model).load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return dict(checkpoint)


def load_latest_ckpt(model_dir: str, model: Any, optimizer: Any,
                     device: Any) -> Optional[Dict[Any, Any]]:
    latest = find_latest_ckpt(model_dir)
    return None if latest is None else load_ckpt(latest, model, optimizer, device)


def save_ckpt(model_dir: str, model: Any, optimizer: Any, epoch: int,
              **kwargs: Any) -> Optional[str]:
    """model_dir/model_<epoch>.pt from rank 0 (None elsewhere)."""
    import torch
    if int(os.environ.get(PYTORCH_DPP_RANK, "0")) != 0:
        return None
    state = {"model": _unwrap(model).state_dict(), "optimizer": optimizer.state_dict(),
             "epoch": epoch, **kwargs}
    path = f"{model_dir.rstrip('/')}/model_{epoch}.pt"
    if not _remote(model_dir):
        os.makedirs(_local(model_dir), exist_ok=True)
        torch.save(state, _local(path))
        return path
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "model.pt")
        torch.save(state, local)
        _fs("mkdir", model_dir)
        _fs("put", "-f", local, path)
    return path
