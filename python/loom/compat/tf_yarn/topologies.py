"""tf-yarn's TaskSpec and NodeLabel: a task type's resources, as loom
roles take them."""
from enum import Enum
from typing import Dict, Union

GB = 2 ** 10
MAX_MEMORY_CONTAINER = 48 * GB
MAX_VCORES_CONTAINER = 48
ALL_TASK_TYPES = {"chief", "worker", "ps", "evaluator", "tensorboard"}


class NodeLabel(Enum):
    """A YARN node label expression: CPU any node, GPU nodes labelled gpu."""
    CPU = ""
    GPU = "gpu"


def _mib(memory: Union[int, str]) -> int:
    """memory as tf-yarn (skein) takes it: MiB as an int, or a string with
    a unit ("2 GiB", "512 MiB", "1G")."""
    if isinstance(memory, int):
        return memory
    s = str(memory).strip().replace(" ", "")
    units = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024,
             "k": 1 / 1024, "kb": 1 / 1024, "kib": 1 / 1024}
    i = len(s)
    while i and not s[i - 1].isdigit():
        i -= 1
    try:
        return int(float(s[:i]) * units[s[i:].lower()])
    except (KeyError, ValueError):
        raise ValueError(f"TaskSpec: memory {memory!r}: MiB as an int, or a number and a unit "
                         "(\"2 GiB\")") from None


class TaskSpec:
    """The resources of each task of a type: memory (MiB, or "2 GiB"),
    vcores, instances, label."""
    __slots__ = ("memory", "vcores", "instances", "label", "termination_timeout_seconds")

    def __init__(self, memory: Union[int, str], vcores: int, instances: int = 1,
                 label: NodeLabel = NodeLabel.CPU, termination_timeout_seconds: int = -1) -> None:
        self.memory = _mib(memory)
        self.vcores = vcores
        self.instances = instances
        self.label = label
        self.termination_timeout_seconds = termination_timeout_seconds


def single_server_topology(memory: int = MAX_MEMORY_CONTAINER,
                           vcores: int = MAX_VCORES_CONTAINER) -> Dict[str, TaskSpec]:
    return {"chief": TaskSpec(memory=memory, vcores=vcores)}
