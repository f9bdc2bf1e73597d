#!/usr/bin/env python
"""How much an update learns from the labels a drift brings, by recipe: the data a site
has (labels a window, windows since the drift) and the epochs it trains them.

Offline, on the accuracy benchmark's digits trace (``deepedge.bench.accuracy``): the site's
first version (:meth:`Site.base_model`, the model the benchmark's site starts from) is
trained on ``PER`` true-labelled images of each of the abrupt drift's first ``WINDOWS``
windows (drawn as the offline reference draws them, ``FRESH_OFFSET`` on), with the site's
update recipe (SGD at the deployment's default rate and momentum, a half cosine over the
epochs), and scored on every request the camera sends in the segment's last ten windows.
``PER`` 34 is about the uniform and least-sure labels of a window at the default label
budget, 110 at the recovery rate. One thread; prints one line per setting, e.g.:

    python scripts/update_recipe_study.py                  # 34 and 110 a window, 17 windows
    python scripts/update_recipe_study.py --per 110 --windows 17 --epochs 10 20 30
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from deepedge.bench.accuracy import SCALES, digits, stream_source
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.site import Site
from deepedge.learning.training import TrainConfig, predict, train_epochs

ABRUPT = 1  # the trace's second segment: the abrupt drift


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per", type=int, nargs="+", default=[34, 110])
    parser.add_argument("--windows", type=int, default=17)
    parser.add_argument("--epochs", type=int, nargs="+", default=[10, 20, 30])
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = SCALES.full
    workload = digits(settings)
    spec = DeploymentSpec.model_validate(workload.spec)
    trace = settings.trace()
    first_window = ABRUPT * settings.segment_windows
    camera, fresh = stream_source(workload, settings), stream_source(workload, settings, True)
    end = first_window + settings.segment_windows
    scored = [camera(trace.lead_windows + w) for w in range(end - 10, end)]
    images = np.concatenate([x for x, _ in scored])
    labels = np.concatenate([y for _, y in scored])
    with tempfile.TemporaryDirectory() as root:
        first = Site(Path(root)).base_model(spec)
    update = spec.update
    recipe = TrainConfig(lr=update.learning_rate, momentum=update.momentum, cosine=True)
    print(f"scored on {len(labels)} requests of windows {end - 10}-{end - 1}; first version "
          f"{float((predict(first, images) == labels).mean()):.4f}")  # fmt: skip
    for per in args.per:
        rng = np.random.default_rng(1)
        drawn = [fresh(trace.lead_windows + w)
                 for w in range(first_window, first_window + args.windows)]  # fmt: skip
        picks = [rng.permutation(len(y))[:per] for _, y in drawn]
        x = np.concatenate([w[0][i] for w, i in zip(drawn, picks, strict=True)])
        y = np.concatenate([w[1][i] for w, i in zip(drawn, picks, strict=True)])
        for epochs in args.epochs:
            model = copy.deepcopy(first).train()
            began = time.perf_counter()
            train_epochs(model, x, y, epochs, recipe, seed=0)
            accuracy = float((predict(model.eval(), images) == labels).mean())
            took = time.perf_counter() - began
            print(f"{per:4d} labels x {args.windows} windows = {len(y):5d}, {epochs:3d} epochs: "
                  f"accuracy {accuracy:.4f} ({took:.1f} s)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
