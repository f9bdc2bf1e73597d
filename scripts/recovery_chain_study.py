#!/usr/bin/env python
"""How fast a chain of updates brings the site back after the abrupt drift, by how its
windows are labelled: offline, on the accuracy benchmark's digits trace
(``deepedge.bench.accuracy``), against the benchmark's offline reference.

The site's first version serves the abrupt drift's first window. Of each window's requests
the camera sends, ``POOL`` are sampled and ``PER`` of those golden-labelled: a ``HARD``
share of them the answers the serving version was least sure of (lowest top probability),
the rest a uniform draw. Once at least ``MIN`` labels are held, and then every ``EVERY``
windows, an update trains the serving version (warm start) on a random 75 % of every label
since the drift (the rest is its gate's, as the site's updates hold out), with the site's
recipe, and serves from the next window on. No gate: every update serves (an upper bound
on what the chain gives). Printed per setting: the served accuracy of each window against
the reference, and ``recovery_s`` as the benchmark counts it (the first window from which
every window to the segment's end is within 3 points), e.g.:

    python scripts/recovery_chain_study.py --setting 150:150:0 300:150:0.5 300:300:0
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch
from abrupt_drift import abrupt_drift, accuracy

from deepedge.bench.accuracy_parts import TOLERANCE
from deepedge.learning.training import TrainConfig, predict, train_epochs

VALIDATION = 0.25


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", nargs="+", default=["150:150:0", "300:150:0.5"],
                        help="POOL:PER:HARD per setting")
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--min", type=int, default=80)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--until", type=int, default=None, metavar="K",
                        help="label at PER and update only in the drift's first K windows, "
                        "then at ROUTINE labels a window (half hard) without updates")
    parser.add_argument("--routine", type=int, default=30)
    parser.add_argument("--keep-updating", action="store_true",
                        help="after the first K windows, go on updating on ROUTINE labels")
    args = parser.parse_args()
    drift = abrupt_drift()
    windows = [drift.camera(w) for w in range(drift.windows)]
    reference_model = drift.reference()
    reference = np.asarray([accuracy(reference_model, w) for w in windows])
    golden = drift.golden()
    print("reference " + " ".join(f"{a:.3f}" for a in reference))
    for setting in args.setting:
        pool, per, hard = setting.split(":")
        for seed in range(args.seeds):
            served = chain(drift.first, golden, windows, int(pool), int(per), float(hard),
                           args.every, args.min, args.epochs, drift.recipe, seed, args.until,
                           args.routine, args.keep_updating)  # fmt: skip
            gap = reference - served
            recovered = len(served)
            for w in range(len(served) - 1, -1, -1):
                if gap[w] > TOLERANCE:
                    break
                recovered = w
            until = len(served) if args.until is None else args.until
            labels = (min(int(pool), int(per)) * until
                      + args.routine * (len(served) - until))  # fmt: skip
            print(f"{setting} seed {seed}: " + " ".join(f"{a:.3f}" for a in served))
            print(f"   recovery_s {recovered * drift.window_s:.0f}; windows 9-23 under the "
                  f"reference by {gap[9:].mean():+.4f}, {int((gap[9:] > TOLERANCE).sum())} > 3 "
                  f"points; {labels} labels", flush=True)  # fmt: skip


def chain(first: torch.nn.Module, golden: torch.nn.Module,
          windows: list[tuple[np.ndarray, np.ndarray]], pool: int, per: int, hard: float,
          every: int, least: int, epochs: int, recipe: TrainConfig,
          seed: int, until: int | None = None, routine: int = 30,
          keep_updating: bool = False) -> np.ndarray:  # fmt: skip
    rng = np.random.default_rng(seed)
    serving = copy.deepcopy(first).eval()
    xs: list[np.ndarray] = []
    served, since = [], None
    for w, (x, y) in enumerate(windows):
        served.append(accuracy(serving, (x, y)))
        late = until is not None and w >= until
        if late:
            per, hard = routine, 0.5
        sampled = rng.permutation(len(y))[:pool]
        n_hard = min(len(sampled), round(hard * per))
        with torch.no_grad():
            top = torch.softmax(serving(torch.as_tensor(x[sampled])), dim=1).max(1).values
        by_doubt = sampled[np.argsort(top.numpy())]
        chosen = list(by_doubt[:n_hard])
        rest = rng.permutation(by_doubt[n_hard:])[: max(0, per - n_hard)]
        xs.append(x[np.concatenate([chosen, rest]).astype(int)])
        held = np.concatenate(xs)
        if len(held) < least or (late and not keep_updating):
            continue
        if since is not None and w - since < every:
            continue
        since = w
        labels = predict(golden, held)
        keep = rng.permutation(len(held))[round(VALIDATION * len(held)):]
        model = copy.deepcopy(serving).train()
        train_epochs(model, held[keep], labels[keep], epochs, recipe, seed=seed + w)
        serving = model.eval()
    return np.asarray(served)


if __name__ == "__main__":
    main()
