"""A tf-yarn PyTorch program written as tf-yarn's pytorch_example.py is
(a model, main_fn(model, trainloader, device, rank, tb_writer) looping
over epochs with trainloader.sampler.set_epoch, model_ckpt.save_ckpt each
epoch, experiment_fn returning a PytorchExperiment, run_on_yarn with a
TaskSpec per task type), with the import changed to loom.compat:

    from loom.compat.tf_yarn.pytorch import run_on_yarn, TaskSpec, NodeLabel, ...

Fashion-MNIST (Debian's dataset-fashion-mnist) in place of CIFAR-10's
download, an MLP in place of the CNN, two workers on CPU (gloo).

    tf_yarn_pytorch.py MODEL_DIR

Prints one line of JSON: the Metrics, and the accuracy on 2000 test images
of the last checkpoint, loaded back with model_ckpt.load_latest_ckpt."""
import gzip
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from loom.compat.tf_yarn.pytorch import DataLoaderArgs, PytorchExperiment, TaskSpec, run_on_yarn
from loom.compat.tf_yarn.pytorch import model_ckpt

DATA = "/usr/share/datasets/fashion-mnist"
MODEL_DIR = sys.argv[1]


def idx(name, n):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    if "images" in name:
        return np.frombuffer(data, np.uint8, n * 784, 16).reshape(n, 784)
    return np.frombuffer(data, np.uint8, n, 8)


class Fashion(torch.utils.data.Dataset):
    def __init__(self, train, n):
        kind = "train" if train else "t10k"
        self.x = torch.tensor(idx(f"{kind}-images-idx3-ubyte.gz", n), dtype=torch.float32) / 255
        self.y = torch.tensor(idx(f"{kind}-labels-idx1-ubyte.gz", n), dtype=torch.int64)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main_fn(model, trainloader, device, rank, tb_writer):
    loss_fn = nn.CrossEntropyLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = 0
    for epoch in range(3):
        trainloader.sampler.set_epoch(epoch)
        running = 0.0
        for i, (inputs, labels) in enumerate(trainloader, 0):
            optimizer.zero_grad()
            loss = loss_fn(model(inputs.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            running += loss.item()
            step += 1
        tb_writer.add_scalar("training_loss", running / (i + 1), step)
        print(f"[{rank}] epoch {epoch + 1} loss {running / (i + 1):.3f}")
        model_ckpt.save_ckpt(MODEL_DIR, model, optimizer, epoch)
    print("Finished Training")


def experiment_fn():
    return PytorchExperiment(
        model=Net(),
        main_fn=main_fn,
        train_dataset=Fashion(True, 6000),
        dataloader_args=DataLoaderArgs(batch_size=64, num_workers=0, drop_last=True,
                                       shuffle=True),
    )


if __name__ == "__main__":
    metrics = run_on_yarn(
        experiment_fn=experiment_fn,
        task_specs={"worker": TaskSpec(memory=768, vcores=1, instances=2)},
        env={"PATH": "/usr/bin:/bin"},  # the nodes' python3, which has torch
        queue="default",
        name="TfYarnPytorch",
    )
    model = Net()
    opt = optim.SGD(model.parameters(), lr=0.1)
    ckpt = model_ckpt.load_latest_ckpt(MODEL_DIR, model, opt, "cpu")
    test = Fashion(False, 2000)
    with torch.no_grad():
        acc = (model(test.x).argmax(1) == test.y).float().mean().item()
    print(json.dumps({
        "total_s": metrics.total_training_duration.total_seconds(),
        "container_s": {k: v.total_seconds() for k, v in metrics.container_duration.items()},
        "train_s": {k: v.total_seconds() for k, v in metrics.train_eval_time_per_node.items()},
        "latest": model_ckpt.find_latest_ckpt(MODEL_DIR), "epoch": ckpt["epoch"],
        "accuracy": acc}))
