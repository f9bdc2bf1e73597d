#!/usr/bin/env python
"""How good the site's golden labeller is, and what its labels teach, on the accuracy
benchmark's drift trace (docs/BENCHMARKS.md, "A teacher worth learning from").

For each golden ensemble size given as ``POOL:EPOCHS:MEMBERS[:BATCH:LR]`` (batch and rate
given: a cosine-decayed rate, as the site trains it), prints its training time and its
accuracy on the trace's first, abrupt and gradual windows. With ``--students V1``, a
checkpoint of the benchmark's first version (``bench.accuracy --out DIR`` keeps it as
``DIR/models/main/digits-v1.pt``), also trains copies of it on 600, 1,200 and 2,400 of the
abrupt segment's samples, labelled by the last ensemble and by the true labels, and prints
their accuracy on the segment's last windows.

    python scripts/golden_study.py 4000:8:3 24000:8:2:128:0.06 \
        --students DIR/models/main/digits-v1.pt
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch

from deepedge.bench.accuracy import SCALES, SEED, digits, stream_source
from deepedge.controlplane.artifacts import load_version
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.learning.models import GoldenModel
from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images
from deepedge.learning.training import (
    GOLDEN_CONFIG,
    TrainConfig,
    predict,
    train_epochs,
    train_golden,
)

SEGMENTS = {"first": range(0, 24, 3), "abrupt": range(24, 48, 2), "gradual": range(54, 72, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="+", help="POOL:EPOCHS:MEMBERS[:BATCH:LR]")
    parser.add_argument("--students", help="the benchmark's v1 checkpoint")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = SCALES.full
    workload = digits(settings)
    source = stream_source(workload, settings)
    lead = settings.trace().lead_windows
    config = DriftConfig(seed=SEED, window_size=settings.per_window)
    stream = DriftingStream(load_digits_images(16), config)
    windows = {name: [source(lead + w) for w in span] for name, span in SEGMENTS.items()}
    golden: GoldenModel | None = None
    for size in args.sizes:
        parts = size.split(":")
        pool, epochs, members = (int(p) for p in parts[:3])
        config = GOLDEN_CONFIG
        if len(parts) == 5:
            config = TrainConfig(lr=float(parts[4]), momentum=0.9, batch_size=int(parts[3]),
                                 weight_decay=1e-4, cosine=True)  # fmt: skip
        started = time.perf_counter()
        x, y = stream.augmented_pool(pool, seed=SEED)
        golden = train_golden(x, y, stream.n_classes, stream.image_size, epochs, members, SEED,
                              device="cpu", config=config)  # fmt: skip
        seconds = time.perf_counter() - started
        scores = {name: round(float(np.mean([(predict(golden, i) == t).mean() for i, t in ws])), 3)
                  for name, ws in windows.items()}  # fmt: skip
        print(f"golden {size}: {seconds:.1f} s, {scores}", flush=True)
    if args.students and golden is not None:
        students(golden, args.students, workload.spec, lambda w: source(lead + w))


def students(golden: GoldenModel, checkpoint: str, spec: dict[str, object], window: object) -> None:
    assert callable(window)
    first = load_version(DeploymentSpec.model_validate(spec), checkpoint)
    test = [window(w) for w in range(40, 48)]
    rng = np.random.default_rng(0)
    for k in (4, 8, 16):
        images, true = [], []
        for w in range(24, 24 + k):
            x, y = window(w)
            pick = rng.choice(len(x), 150, replace=False)
            images.append(x[pick])
            true.append(y[pick])
        x_all, y_true = np.concatenate(images), np.concatenate(true)
        for name, labels in (("golden", predict(golden, x_all)), ("true", y_true)):
            model = copy.deepcopy(first)
            model.train()
            train_epochs(model, x_all, labels, 20, TrainConfig(cosine=True), seed=1)
            model.eval()
            score = np.mean([(predict(model, i) == t).mean() for i, t in test])
            print(f"student on {len(x_all)} {name} labels (20 epochs, cosine): {score:.3f}",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
