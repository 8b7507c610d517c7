"""prepare.py: writes Fashion-MNIST as feed records: data/train-{0..3}.bin
and data/test.bin, each record 785 bytes (the label, then 28x28 pixels),
format fixed:785. From Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist); --limit N keeps the first N training
images (for a quick run)."""
import argparse
import gzip
from pathlib import Path

import numpy as np

SRC = Path("/usr/share/datasets/fashion-mnist")
ap = argparse.ArgumentParser()
ap.add_argument("--limit", type=int, default=0)
ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "data"))
a = ap.parse_args()


def idx(name):
    with gzip.open(SRC / name) as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


out = Path(a.out)
out.mkdir(parents=True, exist_ok=True)
for part, (img, lab) in {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}.items():
    x, y = idx(img).reshape(-1, 784), idx(lab)
    if part == "train" and a.limit:
        x, y = x[:a.limit], y[:a.limit]
    rec = np.concatenate([y[:, None], x], axis=1).astype(np.uint8)  # (n, 785)
    if part == "test":
        rec.tofile(out / "test.bin")
    else:
        for i, chunk in enumerate(np.array_split(rec, 4)):
            chunk.tofile(out / f"train-{i}.bin")
    print(f"{part}: {len(rec)} records of 785 bytes")
