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
budget, 110 at the recovery rate.

``--score A B`` scores the segment's windows ``A`` to ``B - 1`` instead (0: the drift's
first); ``--golden`` labels the update's images with the site's golden labeller, as the
site does, rather than with their true labels; ``--reference`` also trains the benchmark's
offline reference and reports, per setting, the windows more than 3 points under it (the
rule ``recovery_s`` counts by). One thread; prints one line per setting, e.g.:

    python scripts/update_recipe_study.py                  # 34 and 110 a window, 17 windows
    python scripts/update_recipe_study.py --per 110 --windows 17 --epochs 10 20 30
    python scripts/update_recipe_study.py --per 110 225 --windows 8 --epochs 30 \
        --score 9 24 --golden --reference
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from abrupt_drift import abrupt_drift, accuracy

from deepedge.bench.accuracy_parts import TOLERANCE
from deepedge.learning.training import TrainConfig, predict, train_epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per", type=int, nargs="+", default=[34, 110])
    parser.add_argument("--windows", type=int, default=17)
    parser.add_argument("--epochs", type=int, nargs="+", default=[10, 20, 30])
    parser.add_argument("--score", type=int, nargs=2, default=None, metavar=("A", "B"))
    parser.add_argument("--golden", action="store_true")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--seeds", type=int, default=1, help="training seeds per setting")
    parser.add_argument("--distill", type=float, default=0.0, metavar="T",
                        help="with --golden: also learn the golden labeller's probabilities "
                        "at temperature T (half the loss, scaled by T squared)")
    args = parser.parse_args()
    drift = abrupt_drift()
    a, b = (drift.windows - 10, drift.windows) if args.score is None else args.score
    scored = [drift.camera(w) for w in range(a, b)]
    images = np.concatenate([x for x, _ in scored])
    labels = np.concatenate([y for _, y in scored])
    golden = drift.golden() if args.golden else None

    def per_window(model: torch.nn.Module) -> np.ndarray:
        return np.asarray([accuracy(model, w) for w in scored])

    print(f"scored on {len(labels)} requests of the drift's windows {a}-{b - 1}; first "
          f"version {accuracy(drift.first, (images, labels)):.4f}")  # fmt: skip
    reference = None
    if args.reference:
        reference = per_window(drift.reference())
        print(f"offline reference: {reference.mean():.4f} "
              f"(windows {reference.min():.3f}-{reference.max():.3f})")
    for per in args.per:
        rng = np.random.default_rng(1)
        drawn = [drift.fresh(w) for w in range(args.windows)]
        picks = [rng.permutation(len(y))[:per] for _, y in drawn]
        x = np.concatenate([w[0][i] for w, i in zip(drawn, picks, strict=True)])
        y = np.concatenate([w[1][i] for w, i in zip(drawn, picks, strict=True)])
        soft = None
        if golden is not None:
            told = predict(golden, x)
            print(f"golden labels: {float((told == y).mean()):.4f} of {len(y)} right")
            y = told
            if args.distill:
                with torch.no_grad():
                    soft = golden(torch.as_tensor(x, dtype=torch.float32))
        for epochs in args.epochs:
            for seed in range(args.seeds):
                model = copy.deepcopy(drift.first).train()
                began = time.perf_counter()
                if soft is None:
                    train_epochs(model, x, y, epochs, drift.recipe, seed=seed)
                else:
                    train_distilled(model, x, y, soft, epochs, drift.recipe, args.distill, seed)
                read = accuracy(model.eval(), (images, labels))
                took = time.perf_counter() - began
                line = (f"{per:4d} labels x {args.windows} windows = {len(y):5d}, {epochs:3d} "
                        f"epochs, seed {seed}: accuracy {read:.4f} ({took:.1f} s)")
                if reference is not None:
                    gap = reference - per_window(model)
                    line += (f"; under the reference by {gap.mean():+.4f} (most {gap.max():+.3f}),"
                             f" {int((gap > TOLERANCE).sum())} of {len(gap)} windows > 3 points")
                print(line, flush=True)


def train_distilled(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, teacher: torch.Tensor,
                    epochs: int, recipe: TrainConfig, temperature: float, seed: int) -> None:
    """The update's recipe with half its loss the KL divergence to the teacher's
    log-probabilities at ``temperature`` (scaled by its square)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum)
    rng = np.random.default_rng(seed)
    xs, ys = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y)
    steps, step = epochs * math.ceil(len(y) / recipe.batch_size), 0
    for _ in range(epochs):
        order = torch.as_tensor(rng.permutation(len(y)))
        for start in range(0, len(y), recipe.batch_size):
            for group in optimizer.param_groups:
                group["lr"] = recipe.lr * 0.5 * (1.0 + math.cos(math.pi * step / steps))
            step += 1
            idx = order[start : start + recipe.batch_size]
            out = model(xs[idx])
            hard = F.cross_entropy(out, ys[idx])
            target = F.softmax(teacher[idx] / temperature, dim=1)
            kl = F.kl_div(F.log_softmax(out / temperature, dim=1), target, reduction="batchmean")
            loss = 0.5 * hard + 0.5 * temperature**2 * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
