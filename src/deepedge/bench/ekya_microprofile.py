"""Part 4 of the Ekya benchmark: the micro-profiler against exhaustive retraining (real torch).

Protocol. A drifting digits stream (:mod:`deepedge.learning.stream`); for each tested window
``t`` the deployed edge CNN is the one trained on window ``t - 1`` (continuous learning). The
window's labelled data less a validation split (20%, at most 250 images) is the training
pool. On the digits the validation images are as many images from the stream's validation
part (``DriftConfig.validation_frac``; :meth:`DriftingStream.validation_set`): a window
draws base digits with replacement, so a split of its own images would repeat digits of the
pool (until 2026-11-27 it did: the estimates then saw a third of their validation images'
digits in training, the evaluation images none). A workload validates on the split itself,
as a deployment does with its labelled window. For every retraining
configuration (epochs x data fraction x frozen conv blocks):

* micro-profiling: 5 profiling epochs of 10% of the config's data each, at least 6 SGD steps
  (``ProfileSettings.min_steps``; fresh images in every epoch, ``SampleDraw.FRESH``), Optimus fit,
  extrapolation (:mod:`deepedge.learning.microprofiler`); configurations that differ only in
  their epoch count share one profiling run;
* exhaustive profiling (the ground truth): the full retraining, scored on the window's
  held-out evaluation images.

Figures: median absolute error |predicted - actual| over all (config, window) pairs profiled,
and cost fraction = wall seconds of micro-profiling (training and validation included) /
wall seconds of the exhaustive retrainings of all configurations. From the second window on,
configurations pruned by :mod:`deepedge.planning.window.config_pruning` (far from the estimated
Pareto front in past windows) are not profiled.

With a workload (:mod:`deepedge.workload`; ``python -m deepedge.bench.ekya_microprofile
--workload FILE|NAME [--quick]``) the stream is the workload's windows labelled by its
labeller, the deployed model its model (trained on the window before), the tested windows its
last one (``--quick``) or two, and its frozen layers stay frozen in every configuration.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from deepedge.bench.harness.microprofile import (
    MicroprofileResult,
    ProfilePair,
    microprofile_grid,
)
from deepedge.learning.microprofiler import (
    NamedConfig,
    ProfileSettings,
    micro_profile,
    retrain,
    subset_indices,
    validation_split,
)
from deepedge.learning.models import make_edge_model, select_device
from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images
from deepedge.learning.training import TrainConfig, accuracy, train_epochs
from deepedge.planning.window.config_pruning import ConfigHistory, Outcome
from deepedge.runtime.edge.edge_server import frozen_names
from deepedge.sim.recorded import VALIDATION_FRAC
from deepedge.workload.resolve import Workload
from deepedge.workload.sources import NO_LABEL


def config_grid(quick: bool, n_classes: int = 10) -> list[NamedConfig]:
    epochs = (5, 10) if quick else (5, 10, 20)
    fractions = (1.0,) if quick else (0.5, 1.0)
    return microprofile_grid(epochs, fractions, (0, 1), n_classes)


@dataclass(frozen=True)
class _Window:
    images: np.ndarray  # labelled (golden) for training and validation
    labels: np.ndarray
    eval_images: np.ndarray  # held out, true labels
    eval_labels: np.ndarray
    validation: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None  # n -> images


@dataclass(frozen=True)
class _Setting:
    """The stream, the deployed model's factory, the classes and the windows tested."""

    window: Callable[[int], _Window]
    factory: Callable[[], torch.nn.Module]
    n_classes: int
    tested: tuple[int, ...]


def _digits(quick: bool, seed: int) -> _Setting:
    stream = DriftingStream(
        load_digits_images(16),
        DriftConfig(
            seed=seed,
            window_size=400 if quick else 1500,
            eval_size=200 if quick else 500,
            validation_frac=VALIDATION_FRAC,  # as the recorded Ekya trace keeps
        ),
    )

    def window(t: int) -> _Window:
        w = stream.window(t)
        return _Window(
            w.images,
            w.labels,
            w.eval_images,
            w.eval_labels,
            lambda n: stream.validation_set(t, n),
        )

    def factory() -> torch.nn.Module:
        return make_edge_model(stream.n_classes, stream.image_size, seed=seed)

    return _Setting(window, factory, stream.n_classes, (3,) if quick else (3, 4))


def _of_workload(workload: Workload, quick: bool) -> _Setting:
    n = workload.source.n_windows
    last = 4 if n is None else n - 1
    workload.require_windows(2 if quick else 3, " (a window to deploy from, then the tested)")

    def window(t: int) -> _Window:
        w = workload.window(t)
        eval_labels = w.eval_labels
        if (eval_labels == NO_LABEL).any():
            eval_labels = workload.label(w.eval_images, eval_labels)
        return _Window(w.images, workload.label(w.images, w.labels), w.eval_images, eval_labels)

    tested = (last,) if quick else (last - 1, last)
    return _Setting(window, workload.model_factory, workload.n_classes, tested)


def run_microprofile(
    quick: bool, seed: int = 0, workload: Workload | None = None
) -> MicroprofileResult:
    """Run the protocol with one torch thread (timings of a tiny CNN on a shared CPU are
    dominated by thread contention otherwise); the previous thread count is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        setting = _digits(quick, seed) if workload is None else _of_workload(workload, quick)
        return _run(quick, seed, setting)
    finally:
        torch.set_num_threads(threads)


def _run(quick: bool, seed: int, setting: _Setting) -> MicroprofileResult:
    torch.manual_seed(seed)
    device = select_device()
    configs = config_grid(quick, setting.n_classes)
    history = ConfigHistory(max_gap=0.05, min_windows=1)
    pairs: list[ProfilePair] = []
    profile_s = exhaustive_s = 0.0
    pruned = 0
    for t in setting.tested:
        previous = setting.window(t - 1)
        deployed = setting.factory().to(device)
        keep_frozen = frozen_names(deployed)
        train_epochs(
            deployed, previous.images, previous.labels, 5 if quick else 10, TrainConfig(), seed=seed
        )
        window = setting.window(t)
        val_idx, pool_idx = validation_split(len(window.labels), np.random.default_rng([seed, t]))
        if window.validation is None:
            val = (window.images[val_idx], window.labels[val_idx])
        else:
            val = window.validation(len(val_idx))
        train = (window.images[pool_idx], window.labels[pool_idx])
        kept = history.keep(configs)
        pruned += len(configs) - len(kept)
        t0 = time.perf_counter()
        estimates = micro_profile(
            deployed, train, val, kept, ProfileSettings(seed=seed), keep_frozen
        )
        profile_s += time.perf_counter() - t0
        history.record(
            [Outcome(e.name, e.predicted_accuracy, e.estimated_gpu_seconds) for e in estimates]
        )
        by_name = {e.name: e for e in estimates}
        for i, cfg in enumerate(configs):
            hp = cfg.hyperparameters
            rng = np.random.default_rng([seed, t, i])
            n = len(train[1])
            pool = subset_indices(n, hp.data_fraction, rng)
            t1 = time.perf_counter()
            model, _, train_s = retrain(
                deployed,
                train[0][pool],
                train[1][pool],
                hp,
                hp.epochs,
                seed,
                keep_frozen=keep_frozen,
            )
            exhaustive_s += time.perf_counter() - t1
            actual = accuracy(model, window.eval_images, window.eval_labels)
            est = by_name.get(cfg.name)
            if est is not None:
                pairs.append(
                    ProfilePair(
                        t,
                        cfg.name,
                        est.predicted_accuracy,
                        actual,
                        est.estimated_gpu_seconds,
                        train_s,
                    )
                )
    return MicroprofileResult(tuple(pairs), profile_s, exhaustive_s, pruned)


def main(argv: list[str] | None = None) -> None:
    from deepedge.bench.harness.report import result_line, table
    from deepedge.workload.resolve import load_workload

    parser = argparse.ArgumentParser(description="Ekya's micro-profiler vs exhaustive retraining")
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    parser.add_argument("--workload", default=None, help="workload file or bundled name")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    workload = load_workload(args.workload) if args.workload else None
    micro = run_microprofile(args.quick, args.seed, workload)
    rows = [
        [p.window, p.config, round(p.predicted, 4), round(p.actual, 4), round(p.estimated_s, 3),
         round(p.actual_s, 3)]
        for p in micro.pairs
    ]  # fmt: skip
    print(table(["window", "config", "predicted", "actual", "est s", "measured s"], rows))
    values: dict[str, float | int | str | bool] = {
        "workload": workload.spec.name if workload else "digits-edge-cnn",
        "microprofile_mae": round(micro.mae, 4),
        "microprofile_cost_frac": round(micro.cost_frac, 4),
        "profile_s": round(micro.profile_s, 2),
        "exhaustive_s": round(micro.exhaustive_s, 2),
    }
    print(result_line(values))


if __name__ == "__main__":
    main()
