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
