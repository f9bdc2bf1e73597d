#!/usr/bin/env python
"""A kept ``model-update`` job retrained two ways: by the runtime's asynchronous parameter
server (the threads executor on the emulated paper testbed, as the job ran) and by plain
synchronous SGD in one process, at the same rate and momentum, from the same parent.

Reads a job folder of a benchmark run kept with ``--keep-data`` (its staged
``work/train.npz``, training and validation split, and ``work/parent.pt``, the version it
starts from) of a bundled workload's model (``--model resnet``: ResNet-18 of the photo
workload, 8 classes, 64x64; ``--model edge``: the site's digits CNN), and prints the
validation accuracy of the parent and after each epoch of each way, e.g.::

    python -m deepedge.bench.accuracy --parts resnet --out /tmp/acc --keep-data
    python scripts/async_update_study.py DATA/resnet/data/jobs/TENANT/JOB --lr 0.05 --momentum 0.9
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from deepedge.learning.convergence import StoppingRule
from deepedge.learning.model_state import buffer_arrays, load_model_file
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.resnet import make_resnet
from deepedge.runtime.training.testbed import deep_edge_planner, paper_testbed
from deepedge.runtime.training.update import UpdateConfig, run_model_update

BATCH = 32  # the synchronous SGD's batch (the workload's training.batch_size default)


def factory(name: str) -> nn.Module:
    return make_resnet(8, 64) if name == "resnet" else make_edge_model(10, 16, 8, 0)


def accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(images).argmax(1) == labels).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="a kept model-update job's folder")
    parser.add_argument("--model", choices=("resnet", "edge"), default="resnet")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    staged = np.load(args.job / "work" / "train.npz")
    parent = factory(args.model)
    load_model_file(parent, args.job / "work" / "parent.pt")
    x, y = torch.as_tensor(staged["x_train"]), torch.as_tensor(staged["y_train"])
    xv, yv = torch.as_tensor(staged["x_val"]), torch.as_tensor(staged["y_val"])
    print(f"{len(y)} training, {len(yv)} validation samples; parent {accuracy(parent, xv, yv):.3f}")
    config = UpdateConfig(stopping=StoppingRule(min_epochs=args.epochs, max_epochs=args.epochs),
                          lr=args.lr, momentum=args.momentum)  # fmt: skip
    with tempfile.TemporaryDirectory() as checkpoints:
        result = run_model_update(
            paper_testbed(len(y)), (staged["x_train"], staged["y_train"]),
            (staged["x_val"], staged["y_val"]), lambda: factory(args.model),
            get_flat_weights(parent), Path(checkpoints), planner=deep_edge_planner(0.05, 0),
            config=config, resume=False, initial_buffers=buffer_arrays(parent),
        )  # fmt: skip
    print(f"asynchronous PS ({result.plans[0].policy.value} plan), lr {args.lr} momentum "
          f"{args.momentum}: " + " ".join(f"{a:.3f}" for a in result.accuracies))  # fmt: skip
    torch.manual_seed(0)
    model = factory(args.model)
    load_model_file(model, args.job / "work" / "parent.pt")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    seen = []
    for _ in range(args.epochs):
        model.train()
        order = torch.randperm(len(y))
        for start in range(0, len(y), BATCH):
            batch = order[start : start + BATCH]
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        seen.append(accuracy(model, xv, yv))
    print(f"synchronous SGD (batch {BATCH}), lr {args.lr} momentum {args.momentum}: "
          + " ".join(f"{a:.3f}" for a in seen))


if __name__ == "__main__":
    main()
