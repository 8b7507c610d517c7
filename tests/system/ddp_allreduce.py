"""An unmodified PyTorch script: init_process_group("gloo") with the
default env:// method, as it would run under torchrun. It all-reduces
rank-dependent tensors, trains a tiny DDP model one step, and prints what
it saw."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

t = torch.arange(5, dtype=torch.float32) + rank
dist.all_reduce(t, op=dist.ReduceOp.SUM)
m = torch.tensor([float(rank)])
dist.all_reduce(m, op=dist.ReduceOp.MAX)

torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
x = torch.full((2, 4), float(rank + 1))
model(x).sum().backward()
g = model.module.weight.grad.clone()

print(f"DDP rank={rank} world={world} local={os.environ['LOCAL_RANK']} "
      f"sum={t.tolist()} max={m.item()} grad={g[0, 0].item():.4f}", flush=True)
dist.destroy_process_group()
