#!/usr/bin/env python
"""What one of the accuracy benchmark's update jobs could have learned, retrained offline.

An update job's folder (``DATA/main/data/jobs/<tenant>/<job>`` of a ``bench.accuracy
--keep-data`` run) holds what the site staged for it: its training and held-out samples
(golden-labelled, ``work/train.npz``), its parent (``work/parent.pt``) and its document.
This script runs the same update again through the same learner code (the threads
executor, the asynchronous parameter server and its workers) with other recipes, two
seeds each, and scores every result on windows of the benchmark's trace with their true
labels (``--test FIRST:END``, trace windows; default the abrupt segment's last five):

    python scripts/update_study.py DATA/main/data/jobs/T/J "epochs=10,min=3" \\
        "epochs=20,lr=0.1,sched=cosine,momentum=0.5" --test 43:48

A recipe is ``key=value`` pairs: ``epochs``, ``min`` (epochs before the stop rule may end
it; default all), ``lr``, ``momentum``, ``sched`` (constant or cosine), ``nodes``
(``+``-separated testbed workers). docs/DESIGN.md ("A recurring condition told within
seconds, and updates that learn what a drift's labels teach") records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deepedge.bench.accuracy import SCALES, digits, stream_source
from deepedge.controlplane.artifacts import load_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.learning.training import predict
from deepedge.runtime.training.update import run_model_update
from deepedge.service import learner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("job", type=Path, help="an update job's folder")
    parser.add_argument("recipes", nargs="+")
    parser.add_argument("--test", default="43:48", help="trace windows FIRST:END")
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = SCALES.full
    workload = digits(settings)
    source = stream_source(workload, settings)
    lead = settings.trace().lead_windows
    first, end = (int(v) for v in args.test.split(":"))
    test = [source(lead + w) for w in range(first, end)]
    spec = DeploymentSpec.model_validate(workload.spec)

    def score(path: Path) -> float:
        model = load_version(spec, str(path))
        model.eval()
        return float(np.mean([(predict(model, x) == y).mean() for x, y in test]))

    job = args.job.resolve()
    document: dict[str, Any] = json.loads((job / "work/.deepedge-document.json").read_text())
    print(f"parent {score(job / 'work/parent.pt'):.4f}, "
          f"as it ran {score(job / 'results/model.pt'):.4f}", flush=True)  # fmt: skip
    os.chdir(job / "work")  # the document names its files relative to it
    for recipe in args.recipes:
        given = dict(part.split("=") for part in recipe.split(","))
        run = dict(document, epochs=int(given.get("epochs", document["epochs"])))
        run["min_epochs"] = int(given.get("min", run["epochs"]))
        for key in ("lr", "momentum"):
            if key in given:
                run[key] = float(given[key])
        if "sched" in given:
            run["lr_schedule"] = given["sched"]
        if "nodes" in given:
            run["nodes"] = given["nodes"].split("+")
        scores, summary = [], {}
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory(prefix="deepedge-study-") as folder:
                os.environ["DEEPEDGE_RESULTS_DIR"] = folder
                os.environ["DEEPEDGE_CHECKPOINT_DIR"] = str(Path(folder) / "checkpoints")
                update = learner.ModelUpdateSpec.model_validate({**run, "seed": seed})
                summary = learner._run_update(run_model_update, update)
                scores.append(score(Path(folder) / "model.pt"))
                shutil.rmtree(Path(folder) / "checkpoints", ignore_errors=True)
        print(f"{recipe}: test {', '.join(f'{s:.4f}' for s in scores)}; held-out (golden) "
              f"{summary['final_accuracy']:.4f} after {len(summary['accuracies'])} epochs",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
