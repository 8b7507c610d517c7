"""infer.py: batch inference through loom's data feed: reads the test
records, predicts with the model train.py saved, and writes one line
"<predicted> <label>" per record through the feed's output writer. The
coordinator commits each split's output once (part-NNNNN in feed.output),
so the output holds every record exactly once even if a worker fails and
the job is retried."""
import argparse

import numpy as np
import torch

import loom

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="data/model.pt")
a = ap.parse_args()
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
model.load_state_dict(torch.load(a.model))
with loom.Feed() as feed, torch.no_grad():
    while True:
        b = feed.array_batch(256, 785)
        if b is loom.END:
            break
        if b is loom.EPOCH:
            continue
        pred = model(torch.from_numpy(b[:, 1:].astype(np.float32) / 255.0)).argmax(1).numpy()
        feed.write("".join(f"{p} {y}\n" for p, y in zip(pred, b[:, 0])))
    print(f"predicted {feed.stats()['records']} records", flush=True)
