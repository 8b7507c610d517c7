"""What GPUs a task sees (docs/spec.md, "The task's environment").

A role with `gpus: 0` sees none: the agent sets CUDA_VISIBLE_DEVICES to the
empty string (CUDA, so TensorFlow, PyTorch and JAX, then finds no device),
whatever the host left in the environment (a GPU node's login, a Slurm
allocation's). With GPUs, the devices the backend gave: local round-robin
over /dev/nvidia<N>; on YARN, whose allocation here is a count without
device ids (yarn.io/gpu as a countable resource, no GPU plugin on the
NodeManagers), loom sets nothing and the task sees what the NodeManager's
isolation gives it.

Each task prints `set=<yes or nothing> val=[<value>]`, so "set and empty"
and "unset" are told apart.
"""

import os
import re
from pathlib import Path

import pytest

from clusters import hadoop_available

PRINT = "echo set=${CUDA_VISIBLE_DEVICES+yes} val=[${CUDA_VISIBLE_DEVICES-}]"


def seen(out: str) -> dict:
    """task -> (set, value) from the console's `[role:index] set=.. val=[..]`."""
    got = {}
    for m in re.finditer(r"^\[(\w+:\d+)\] set=(\w*) val=\[([^\]]*)\]$", out, re.M):
        got[m.group(1)] = (m.group(2) == "yes", m.group(3))
    return got


def local_gpus() -> int:
    return sum(1 for p in Path("/dev").glob("nvidia*") if p.name[6:].isdigit())


def test_a_role_without_gpus_sees_none_on_the_local_backend(loom):
    """The client's environment says two GPUs (as a GPU node's or a Slurm
    allocation's would); the roles without GPUs must not see them."""
    s = loom.spec(f"""
name: nogpu
roles:
  chief: {{command: '{PRINT}'}}
  worker: {{instances: 2, gpus: 0, command: '{PRINT}'}}
""")
    r = loom.run("run", s, timeout=60, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert seen(r.stdout) == {"chief:0": (True, ""), "worker:0": (True, ""),
                              "worker:1": (True, "")}, r.stdout


def test_gpus_are_handed_out_round_robin_on_the_local_backend(loom):
    n = local_gpus()
    if n == 0:
        pytest.skip("no /dev/nvidia<N> on this machine: the local backend refuses gpus > 0")
    s = loom.spec(f"""
name: somegpu
roles:
  worker: {{instances: 2, gpus: 1, command: '{PRINT}'}}
  evaluator: {{gpus: 0, command: '{PRINT}'}}
""")
    r = loom.run("run", s, timeout=60, env={"CUDA_VISIBLE_DEVICES": "7"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = seen(r.stdout)
    # one GPU each, the cursor going round the machine's GPUs in task order
    assert got == {"worker:0": (True, "0"), "worker:1": (True, str(1 % n)),
                   "evaluator:0": (True, "")}, r.stdout


# Slurm: test_slurm_place.py (its cluster has the fake GPUs).


@pytest.mark.skipif(not hadoop_available() and not os.environ.get("LOOM_NO_SKIP"),
                    reason="needs java and mvn (scripts/setup.sh) for Hadoop")
def test_yarn_gpus_zero_sees_none_and_a_count_without_ids_sets_nothing(yloom, yarn):
    """The chief (gpus: 0) sees none even where its container's environment
    would say otherwise (the spec's env gives CUDA_VISIBLE_DEVICES, as a
    site's container launch environment may); the worker got 2 of nm1's
    yarn.io/gpu, a count without device ids: loom sets nothing of its own
    (the spec's env is what it sees)."""
    s = yloom.spec(f"""
name: ygpus
backend: yarn
env: {{CUDA_VISIBLE_DEVICES: "0,1"}}
roles:
  chief: {{memory: 128MiB, gpus: 0, command: '{PRINT}'}}
  worker: {{gpus: 2, label: gpu, vcores: 2, memory: 256MiB, command: '{PRINT}'}}
""")
    r = yloom.run("run", s, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert seen(r.stdout) == {"chief:0": (True, ""), "worker:0": (True, "0,1")}, r.stdout
    ev = {e["task"]: e for e in yloom.events() if e["event"] == "container"}
    assert (ev["chief:0"]["gpus"], ev["worker:0"]["gpus"]) == (0, 2), ev


# Spark, and every backend's gpus: 0 with the spec's env saying otherwise:
# test_contract.py's test_roles_environment_and_tf_config.
