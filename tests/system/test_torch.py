"""An unmodified PyTorch DDP script (gloo, env://) under loom: chief + 2
workers with procs: 2, so 5 processes, all_reduce results checked."""
import re
from pathlib import Path

import pytest

PY = "/usr/bin/python3"
SCRIPT = Path(__file__).with_name("ddp_allreduce.py")


def have_torch():
    import subprocess
    return subprocess.run([PY, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not have_torch(), reason="Debian's python3-torch is not installed")
def test_pytorch_ddp_gloo_env_init(loom):
    spec = loom.spec(f"""
name: ddp
env: {{OMP_NUM_THREADS: "1"}}
roles:
  chief: {{procs: 2, command: [{PY}, {SCRIPT}]}}
  worker: {{instances: 2, procs: 2, command: [{PY}, {SCRIPT}]}}
""")
    r = loom.run("run", spec, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if "DDP rank=" in l]
    assert len(lines) == 6
    world = 6
    ranks = set()
    for l in lines:
        m = re.search(r"DDP rank=(\d+) world=(\d+) local=(\d) sum=\[(.*)\] max=([\d.]+) "
                      r"grad=([-\d.]+)", l)
        assert m, l
        rank, w, local = int(m[1]), int(m[2]), int(m[3])
        ranks.add(rank)
        assert w == world
        assert local == rank % 2  # procs: 2, ranks in order within a task
        sums = [float(x) for x in m[4].split(",")]
        # sum over ranks of (i + rank) = world * i + world*(world-1)/2
        assert sums == [world * i + world * (world - 1) / 2 for i in range(5)]
        assert float(m[5]) == world - 1
        # DDP averages gradients: d/dw00 of sum(x w) over 2 rows = 2*(rank+1), averaged
        assert abs(float(m[6]) - sum(2 * (k + 1) for k in range(world)) / world) < 1e-4
    assert ranks == set(range(world))
    # chief:0's first process is rank 0 and its line carries the [chief:0.0] prefix
    assert any(l.startswith("[chief:0.0] DDP rank=0 ") for l in lines)


TORCH_HELPERS = r"""
import json, os, sys
import torch, torch.distributed as dist
from torch.utils.data import DataLoader
import loom.torch as lt

rank, world = lt.init(timeout=120)
assert lt.init() == (rank, world)  # a second call changes nothing
ds = lt.FeedDataset(shape=(2, 3), dtype="uint8")
loader = DataLoader(ds, batch_size=5)
per_epoch = []
for p in range(2):  # one pass reads both epochs; the second nothing
    n, total, shapes = 0, 0, set()
    for b in loader:
        shapes.add(tuple(b.shape[1:]))
        n += b.shape[0]
        total += int(b.sum())
    t = torch.tensor([n, total], dtype=torch.int64)
    dist.all_reduce(t)  # what every task read, together (each is at the feed's end)
    # the shapes every task saw (one task may have read nothing: the feed
    # may give all the splits to the other)
    seen = [None] * world
    dist.all_gather_object(seen, sorted(shapes))
    union = sorted({tuple(x) for s in seen for x in s})
    per_epoch.append([int(t[0]), int(t[1]), union, ds.epoch])
try:
    next(iter(DataLoader(lt.FeedDataset(), num_workers=1)))
    sub = "no error"
except RuntimeError as e:
    sub = str(e)
if rank == 0:
    print("RESULT " + json.dumps({"world": world, "backend": dist.get_backend(),
                                  "epochs": per_epoch, "sub": sub}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.skipif(not have_torch(), reason="Debian's python3-torch is not installed")
def test_torch_helpers_init_and_feed_dataset(loom, tmp_path):
    """loom.torch.init() sets up the process group from loom's variables
    (gloo: no GPU here), and FeedDataset gives a DataLoader pass the
    task's records of every epoch, split between the tasks as the feed
    decides: over both workers every record of both epochs is read once,
    with its bytes, shaped as asked; after the feed's end a pass is empty. A DataLoader with
    worker processes is refused; init() in a role without ranks says so."""
    from conftest import LIBLOOM, ROOT, pylib_env, yaml_env
    recs = bytes((i * 7 + j) % 256 for i in range(400) for j in range(6))
    (tmp_path / "data.bin").write_bytes(recs)
    (tmp_path / "t.py").write_text(TORCH_HELPERS)
    (tmp_path / "ps.py").write_text("import loom.torch as lt\n"
                                    "try:\n    lt.init()\nexcept RuntimeError as e:\n"
                                    "    print('PS', e, flush=True)\n")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "python"),
           "LOOM_LIBRARY": str(LIBLOOM), **pylib_env()}
    spec = loom.spec(f"""
name: torchhelpers
env: {yaml_env(env)}
roles:
  worker: {{instances: 2, command: [{PY}, {tmp_path / "t.py"}]}}
  ps: {{command: [{PY}, {tmp_path / "ps.py"}]}}
feed:
  input: [{tmp_path / "data.bin"}]
  format: fixed:6
  epochs: 2
""")
    r = loom.run("run", spec, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if "RESULT " in l)
    import json
    res = json.loads(line.split("RESULT ", 1)[1])
    assert res["world"] == 2 and res["backend"] == "gloo", res
    total = sum(recs)
    # every record of both epochs read once, with its bytes, shaped (2, 3),
    # in the first pass (rank 0's last record of epoch 0 or 1, as the feed
    # gave it splits); the second pass, after the feed's end, is empty
    first, second = res["epochs"]
    assert first[:3] == [800, 2 * total, [[2, 3]]] and first[3] in (0, 1), res["epochs"]
    assert second == [0, 0, [], first[3]], res["epochs"]
    assert "num_workers=0" in res["sub"], res["sub"]
    assert "[ps:0] PS loom.torch.init: MASTER_ADDR" in r.stdout and \
        "the role 'ps' does not train" in r.stdout, r.stdout
