"""tf-yarn's PyTorch API on loom (`from loom.compat.tf_yarn.pytorch import
run_on_yarn, PytorchExperiment, DataLoaderArgs, TaskSpec, NodeLabel`).

Each task runs what tf-yarn's worker runs: experiment_fn(), the process
group (loom.torch.init: gloo on CPU, nccl where the task has a GPU), the
model in DistributedDataParallel, a DataLoader over train_dataset with a
DistributedSampler (shuffle from dataloader_args), then
main_fn(ddp_model, trainloader, device, rank, tb_writer), with
PYTORCH_DPP_RANK set for model_ckpt; tb_writer is torch's SummaryWriter
when TensorBoard is importable (its files put into tensorboard_hdfs_dir
afterwards), else a writer whose add_scalar reports loom metrics."""
from typing import Any, Callable, Dict, Optional, Union

from ..client import Metrics, RunFailed, get_safe_experiment_fn, run
from ..topologies import NodeLabel, TaskSpec
from .experiment import DataLoaderArgs, DistributedDataParallelArgs, PytorchExperiment

__all__ = ["PytorchExperiment", "DataLoaderArgs", "DistributedDataParallelArgs", "run_on_yarn",
           "RunFailed", "Metrics", "TaskSpec", "NodeLabel", "get_safe_experiment_fn"]


def run_on_yarn(experiment_fn: Callable[[], PytorchExperiment], task_specs: Dict[str, TaskSpec],
                *, pyenv_zip_path: Union[None, str, Dict[NodeLabel, str]] = None,
                skein_client: Any = None, files: Optional[Dict[str, str]] = None,
                env: Optional[Dict[str, str]] = None, queue: str = "default",
                acls: Any = None, file_systems: Any = None,
                eval_monitor_log_thresholds: Any = None, nb_retries: int = 0,
                custom_task_module: Optional[str] = None, name: str = "RunOnYarn",
                pre_script_hook: Optional[str] = None, backend: str = "yarn") -> Metrics:
    """Runs the experiment on YARN, every task of task_specs training (a
    worker each, ranks in task order); waits; returns Metrics; raises
    RunFailed. backend (loom's, not tf-yarn's) runs it elsewhere: "local",
    "slurm". See the module's text and docs/python.md."""
    from .worker import task
    return run(task, experiment_fn, task_specs, pyenv_zip_path=pyenv_zip_path, files=files,
               env=env, queue=queue, nb_retries=nb_retries, name=name,
               custom_task_module=custom_task_module, backend=backend,
               refused={"skein_client": skein_client, "acls": acls,
                        "file_systems": file_systems,
                        "eval_monitor_log_thresholds": eval_monitor_log_thresholds,
                        "pre_script_hook": pre_script_hook})
