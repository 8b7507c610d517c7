"""train.py: trains a Fashion-MNIST MLP in PyTorch from loom's data feed.

Each worker reads batches from the feed (dynamic splits: a fast worker
reads more) as numpy arrays, one C call a batch, while libloom reads the
next splits on its own thread; each trains its own copy of the model from
the same initialization. At the end the workers average their parameters
(one allreduce over torch.distributed, set up by loom's torchrun-style
variables) and the first one reports test accuracy and saves the model."""
import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist

import loom

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--test", default="data/test.bin")
ap.add_argument("--save", default="")
a = ap.parse_args()

torch.manual_seed(0)  # the same initial model in every worker
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
dist.init_process_group("gloo")
rank = dist.get_rank()

t0 = time.time()
seen, losses = 0, []
buf = np.empty((a.batch, 785), np.uint8)  # reused: each batch is converted at once
with loom.Feed() as feed:
    while True:
        b = feed.array_batch(a.batch, 785, out=buf)  # (k, 785) uint8: label, pixels
        if b is loom.END:
            break
        if b is loom.EPOCH:
            print(f"rank {rank}: epoch {feed.epoch} begins; "
                  f"loss {np.mean(losses[-100:]):.3f}", flush=True)
            continue
        x = torch.from_numpy(b[:, 1:].astype(np.float32) / 255.0)
        y = torch.from_numpy(b[:, 0].astype(np.int64))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        seen += len(b)
    st = feed.stats()
print(f"rank {rank}: {seen} records in {time.time() - t0:.1f}s, {st['splits']} splits, "
      f"waited {st['wait_s']:.2f}s for data, last loss {np.mean(losses[-100:]):.3f}",
      flush=True)

with torch.no_grad():  # average the workers' models
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()
if rank == 0:
    t = np.fromfile(a.test, np.uint8).reshape(-1, 785)
    with torch.no_grad():
        pred = model(torch.from_numpy(t[:, 1:].astype(np.float32) / 255.0)).argmax(1).numpy()
    print(f"TEST accuracy={(pred == t[:, 0]).mean():.4f} on {len(t)} images", flush=True)
    if a.save:
        torch.save(model.state_dict(), a.save)
dist.destroy_process_group()
