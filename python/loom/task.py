"""Who this process is in its job, from the environment loom gives every
task (README, "What a task sees"); no connection is made. For the KV
store, events, metrics and collectives use loom.Loom(); for the data feed
loom.Feed()."""
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from .errors import NotInTask


def _int(env: Mapping[str, str], key: str) -> Optional[int]:
    v = env.get(key)
    try:
        return int(v) if v else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Task:
    """This task: rank and local_rank are None for roles outside the ranks
    (chief and worker processes have them); cluster is every role's
    host:port list (LOOM_CLUSTER)."""

    job_id: str
    job_dir: str
    role: str
    index: int
    task: str                  # "worker:1"
    attempt: int
    rank: Optional[int]
    world_size: Optional[int]
    local_rank: Optional[int]
    cluster: Dict[str, List[str]] = field(hash=False)
    host: Optional[str] = None
    port: Optional[int] = None
    generation: Optional[int] = None


def task(env: Optional[Mapping[str, str]] = None) -> Task:
    """This task, from os.environ (or env). Raises NotInTask outside a loom
    job."""
    e = os.environ if env is None else env
    missing = [k for k in ("LOOM_JOB_ID", "LOOM_ROLE", "LOOM_INDEX") if not e.get(k)]
    if missing:
        raise NotInTask("not in a loom task: " + ", ".join(missing) + " not set (loom.task() "
                        "reads the environment loom gives a task's processes)")
    try:
        cluster = json.loads(e.get("LOOM_CLUSTER") or "{}")
    except ValueError:
        cluster = {}
    return Task(job_id=e["LOOM_JOB_ID"], job_dir=e.get("LOOM_JOB_DIR", ""), role=e["LOOM_ROLE"],
                index=_int(e, "LOOM_INDEX") or 0,
                task=e.get("LOOM_TASK") or f"{e['LOOM_ROLE']}:{e['LOOM_INDEX']}",
                attempt=_int(e, "LOOM_ATTEMPT") or 0, rank=_int(e, "LOOM_RANK"),
                world_size=_int(e, "LOOM_WORLD_SIZE"), local_rank=_int(e, "LOOM_LOCAL_RANK"),
                cluster=cluster if isinstance(cluster, dict) else {},
                host=e.get("LOOM_HOST") or None, port=_int(e, "LOOM_PORT"),
                generation=_int(e, "LOOM_GENERATION"))
