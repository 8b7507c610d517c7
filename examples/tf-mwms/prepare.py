"""prepare.py: writes Fashion-MNIST as feed records for train.py.

The feed hands out records, and Debian's dataset keeps images and labels in
separate idx files, so this pairs them: each record is 785 bytes, the label
then the 28x28 pixels, stored as idx files of shape (n, 785) (uint8, format
`idx` in the spec: the feed checks each header against its file's size when
the job starts). The training set is cut into --parts files so that the
feed has many splits to hand out and every worker gets a share.

    data/train-00.idx ... train-29.idx    60,000 training records
    data/test.idx                          10,000 test records (read by the chief)

From /usr/share/datasets/fashion-mnist (dataset-fashion-mnist)."""
import argparse
import gzip
import struct
from pathlib import Path

import numpy as np

SRC = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path):
    """An idx file (gzip-compressed or not) as a numpy array."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an idx file of unsigned bytes")
    nd = raw[3]
    dims = struct.unpack(f">{nd}I", raw[4:4 + 4 * nd])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def write_idx(path, a):
    """a (uint8, 2-d) as an idx file."""
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape))
        f.write(np.ascontiguousarray(a, np.uint8).tobytes())


def records(src, images, labels):
    x, y = read_idx(src / images), read_idx(src / labels)
    if len(x) != len(y):
        raise ValueError(f"{images}: {len(x)} images but {labels}: {len(y)} labels")
    return np.concatenate([y[:, None], x.reshape(len(x), -1)], axis=1)  # (n, 785)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=str(SRC), help="the four *-ubyte(.gz) files")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "data"))
    ap.add_argument("--parts", type=int, default=30, help="training files (feed splits)")
    a = ap.parse_args()
    src, out = Path(a.src), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "" if (src / "train-images-idx3-ubyte").exists() else ".gz"
    train = records(src, "train-images-idx3-ubyte" + suffix, "train-labels-idx1-ubyte" + suffix)
    test = records(src, "t10k-images-idx3-ubyte" + suffix, "t10k-labels-idx1-ubyte" + suffix)
    for old in out.glob("train-*.idx"):
        old.unlink()
    for i, part in enumerate(np.array_split(train, a.parts)):
        write_idx(out / f"train-{i:02d}.idx", part)
    write_idx(out / "test.idx", test)
    print(f"{out}: {len(train)} training records in {a.parts} files, {len(test)} test records, "
          f"785 bytes each (label, 28x28 pixels)")


if __name__ == "__main__":
    main()
