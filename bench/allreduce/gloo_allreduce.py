#!/usr/bin/python3
"""gloo_allreduce.py: the Gloo peer of the allreduce benchmark.

Times torch.distributed.all_reduce (f32 sum, in place) on the gloo backend
with the same method as loom_allreduce.c: per iteration, a barrier, then the
allreduce timed on every rank; the iteration's time is the max over ranks;
the figure is the median over iterations. Prints one line per size from
rank 0.

    gloo_allreduce.py --n N --sizes bytes:iters:warmup,...

starts N processes on 127.0.0.1 (MASTER_PORT a free port) and waits for
them. Needs Debian's python3-torch: run it with /usr/bin/python3.

    gloo_allreduce.py --worker --sizes bytes:iters:warmup,...

is one rank, started by the caller with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT (and GLOO_SOCKET_IFNAME) in its environment: hosts.sh starts
one in each network namespace that way.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def parse_sizes(spec):
    out = []
    for part in spec.split(","):
        f = part.split(":")
        b = int(f[0])
        iters = int(f[1]) if len(f) > 1 else 20
        warm = int(f[2]) if len(f) > 2 else 5
        if b <= 0 or b % 4 or iters < 1 or warm < 0:
            raise SystemExit(f"bad --sizes entry '{part}'")
        out.append((b, iters, warm))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """Linux: SIGKILL this worker when the launcher goes, however it goes."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def worker(sizes):
    die_with_parent()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    for nbytes, iters, warm in sizes:
        count = nbytes // 4
        # Check once against the closed form (as bench_util.h).
        i13 = torch.arange(count, dtype=torch.int64) % 13
        buf = (i13 + (rank + 1)).to(torch.float32)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        want = (i13 * n + n * (n + 1) // 2).to(torch.float32)
        bad = torch.tensor([0 if torch.equal(buf, want) else 1])
        if bad.item():
            idx = int((buf != want).nonzero()[0])
            print(f"gloo_allreduce: rank {rank} bytes {nbytes}: element {idx} "
                  f"is {buf[idx].item()}, want {want[idx].item()}",
                  file=sys.stderr)
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item():
            return 1
        del i13, want
        buf.zero_()  # zeros from here on: repeated sums stay finite
        for _ in range(warm):
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        t = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf, op=dist.ReduceOp.SUM)
            t[i] = time.perf_counter() - t0
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            ts = sorted(t.tolist())
            med = ts[iters // 2] if iters % 2 else 0.5 * (ts[iters // 2 - 1] + ts[iters // 2])
            algbw = nbytes / med / 1e9
            busbw = algbw * 2 * (n - 1) / n
            print(f"name=allreduce peer=gloo transport=tcp n={n} bytes={nbytes} "
                  f"iters={iters} median_s={med:.9f} min_s={ts[0]:.9f} "
                  f"algbw_GBps={algbw:.4f} busbw_GBps={busbw:.4f} "
                  f"samples_s={','.join(f'{x:.9f}' for x in ts)}", flush=True)
    dist.destroy_process_group()
    return 0


def launch(n, sizes_spec):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(n), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    # run.sh's timeout sends SIGTERM: leave through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    procs = []
    for r in range(n):
        env_r = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker",
             "--sizes", sizes_spec], env=env_r))
    rc = 0
    try:
        for p in procs:
            rc = rc or p.wait()
    finally:
        for p in procs:  # a failed rank leaves the others blocked: end them
            if p.poll() is None:
                p.kill()
                p.wait()
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--sizes", default="4096:200:20")
    ap.add_argument("--worker", action="store_true",
                    help="be one rank; RANK, WORLD_SIZE, MASTER_ADDR and "
                    "MASTER_PORT come from the environment")
    a = ap.parse_args()
    sizes = parse_sizes(a.sizes)
    if a.worker:
        return worker(sizes)
    return launch(a.n, a.sizes)


if __name__ == "__main__":
    sys.exit(main())
