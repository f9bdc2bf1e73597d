"""Ekya's micro-profiler (Sec. 4.3): cheap estimates of retraining accuracy and cost.

For each candidate retraining configuration ``gamma`` (epochs ``E``, batch size, head width,
frozen conv blocks, data fraction ``f``) and a window with training pool ``D``:

1. the profiling epoch size is ``m = max(sample_fraction * f * |D|, min_steps * B)``: the
   paper's 5-10% of the config's training data ``f * |D|``, but at least ``min_steps``
   optimizer steps of the config's batch size ``B``. What the early curve shows is a number
   of SGD steps, not a fraction of the data: on a small pool 10% is a single step per
   profiling epoch, and five steps of a ResNet under drift are a flat, noisy stretch that
   the fit reads as a plateau (measured on ``bench.workloads`` part 4, docs/BENCHMARKS.md,
   median error 0.135 with one step per profiling epoch, 0.03-0.05 with six). What
   ``min_steps`` adds is bounded by ``max_cost_frac`` (10 %) of the samples of the
   exhaustive retrainings that share the run (:func:`profile_epoch_size`), so a cheap
   configuration (one epoch of a small pool) is not profiled for longer than it retrains.
   With ``FRESH`` draws a profiling epoch may be larger than the pool: its blocks then span
   passes (:func:`fresh_blocks`);
2. retrain a copy of the deployed model for ``profile_epochs`` profiling epochs of ``m`` images
   each, measuring the validation accuracy ``acc_k`` after each epoch ``k`` on a validation
   split of the window (through the frozen blocks' outputs, computed once per split and
   frozen-block count, when the configuration freezes blocks that hold no buffers:
   :mod:`deepedge.learning.frozen_prefix`; the accuracies are the same, the evaluations
   cheaper). Which ``m`` images (``ProfileSettings.draw``):

   * ``SampleDraw.FRESH`` (default): epoch ``k`` trains on the ``k``-th block of ``m`` images
     of a shuffled pass over the config's data (a new shuffle when a pass is used up), so the
     profile is the first ``k m`` samples of a full run in another random order;
   * ``SampleDraw.FIXED``: one uniform random sample ``S``, ``|S| = m``, in every epoch (the
     paper's "small subset of the training data").

   Both process ``profile_epochs * m`` samples, so they cost the same compute; ``FRESH`` reads
   up to ``profile_epochs`` times as many distinct images (each once). On the ``SAMPLES`` axis
   (step 4) the curve is read as a full run's accuracy after ``x`` full-data epochs. That
   reading holds for fresh blocks; repeating one sample fits the model to ``S`` and its
   validation accuracy flattens early, which the fit then carries out to ``E`` epochs
   (measured on the recorded Ekya trace, :mod:`deepedge.sim.recorded`: the mean signed error
   of the estimates over its 1,728 rows was -0.024 with ``FIXED`` and -0.008 with ``FRESH``;
   ``FIXED`` estimated about half the real gain of the 8-epoch configurations);
3. fit the Optimus curve ``acc(x) = 1 - (1/(b0 x + b1) + b2)``, ``b >= 0``
   (:func:`deepedge.learning.convergence.fit_optimus`), to the points ``(x_k, acc_k)``;
4. extrapolate to the full run: ``x`` counts training progress in epochs of the sample
   (``ExtrapolationAxis.EPOCHS``, the paper's reading: ``acc(E)``) or in samples processed,
   expressed as full-data epochs (``ExtrapolationAxis.SAMPLES``: ``x_k = k m / (f |D|)``,
   predict ``acc(E)``);
5. cost: the measured seconds per sample of the profiling epochs (on the whole device, the
   "100% allocation") times ``E * f * |D|`` samples.

Steps 1-3 do not depend on ``E``: configurations that differ only in their epoch count
share one profiling run and read its curve at their own ``E`` (step 4). With the usual grid
of epoch counts this divides the profiling cost by the number of epoch counts.

Pruning (:mod:`deepedge.planning.window.config_pruning`): after each window whose actual (or
estimated) outcomes are known, every configuration's distance to the accuracy/cost Pareto
front is recorded (accuracy of the best front point at no higher cost minus its own);
configurations whose mean distance over at least ``min_windows`` windows exceeds ``max_gap``
are not profiled again.

Labels: the stream's labels stand in for the golden model's labels of the window's sample.
"""

from __future__ import annotations

import copy
import enum
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.convergence import OptimusCurve, fit_optimus
from deepedge.learning.frozen_prefix import make_scorer
from deepedge.learning.models import layers
from deepedge.learning.training import (
    TrainConfig,
    accuracy,
    make_optimizer,
    train_epochs,
    training_step,
)
from deepedge.planning.window.documents import RetrainingConfig, RetrainingHyperparameters

log = logging.getLogger(__name__)


class ExtrapolationAxis(enum.Enum):
    """What the curve's ``x`` counts (module docstring, step 4)."""

    EPOCHS = "epochs"
    SAMPLES = "samples"


class SampleDraw(enum.Enum):
    """Which images each profiling epoch trains on (module docstring, step 2)."""

    FRESH = "fresh"
    FIXED = "fixed"


@dataclass(frozen=True)
class NamedConfig:
    name: str
    hyperparameters: RetrainingHyperparameters


@dataclass(frozen=True)
class ProfileSettings:
    sample_fraction: float = 0.1
    profile_epochs: int = 5
    min_steps: int = 6  # optimizer steps per profiling epoch, at least (module docstring)
    max_cost_frac: float = 0.1  # bounds what min_steps adds (module docstring, step 1)
    axis: ExtrapolationAxis = ExtrapolationAxis.SAMPLES
    draw: SampleDraw = SampleDraw.FRESH
    lr: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.sample_fraction <= 1.0:
            raise InvalidInputError("sample_fraction must be in (0, 1]", field="sample_fraction")
        if self.profile_epochs < 2:
            raise InvalidInputError("profile_epochs must be >= 2 to fit", field="profile_epochs")
        if self.min_steps < 1:
            raise InvalidInputError("min_steps must be >= 1", field="min_steps")
        if not 0.0 < self.max_cost_frac <= 1.0:
            raise InvalidInputError("max_cost_frac must be in (0, 1]", field="max_cost_frac")


@dataclass(frozen=True)
class ConfigEstimate:
    """The micro-profiler's answer for one configuration."""

    name: str
    hyperparameters: RetrainingHyperparameters
    curve: OptimusCurve
    points: tuple[tuple[float, float], ...]  # (x_k, validation accuracy after epoch k)
    predicted_accuracy: float
    estimated_gpu_seconds: float  # full retraining at 100% of the device
    seconds_per_sample: float  # measured while profiling
    data_size: int  # samples of the config's full training data
    profile_seconds: float  # what profiling this configuration cost

    def to_retraining_config(self) -> RetrainingConfig:
        return RetrainingConfig(
            name=self.name,
            accuracy_after=min(1.0, max(0.0, self.predicted_accuracy)),
            gpu_seconds=self.estimated_gpu_seconds,
            hyperparameters=self.hyperparameters,
        )


def retraining_blocks(model: nn.Module) -> list[nn.Module]:
    """What ``frozen_layers`` counts: the children of a ``features`` ``nn.Sequential`` (the
    conv blocks of the edge CNN, the stages of a ResNet), else the model's layers (modules
    owning parameters, :func:`deepedge.learning.models.layers`)."""
    features = getattr(model, "features", None)
    if isinstance(features, nn.Sequential):
        return list(features.children())
    return [module for _, module in layers(model)]


def _linear_head(model: nn.Module) -> nn.Linear | None:
    """The first linear layer of the model's ``head`` (a Linear or a Sequential), if any."""
    head = getattr(model, "head", None)
    first = head[0] if isinstance(head, nn.Sequential) and len(head) else head
    return first if isinstance(first, nn.Linear) else None


def build_retraining_model(
    deployed: nn.Module, hp: RetrainingHyperparameters, keep_frozen: Collection[str] = ()
) -> nn.Module:
    """A copy of ``deployed`` set up for ``hp``.

    The first ``frozen_layers`` blocks (:func:`retraining_blocks`) and the parameters named
    in ``keep_frozen`` (a workload's frozen layers) are frozen; every other parameter trains.
    ``last_layer_neurons`` equal to the number of classes fine-tunes the existing linear head;
    any other value replaces it by a fresh head
    ``Linear(features -> neurons) -> ReLU -> Linear(neurons -> classes)``, unless ``deployed``
    already has such a head of that width (a model that an earlier retraining with the same
    configuration produced), which is then fine-tuned. A model without a linear ``head``
    keeps its own output layer whatever ``last_layer_neurons`` says.
    """
    model = copy.deepcopy(deployed)
    for name, p in model.named_parameters():
        p.requires_grad_(name not in keep_frozen)
    blocks = retraining_blocks(model)
    if hp.frozen_layers > len(blocks):
        raise InvalidInputError(
            f"frozen_layers {hp.frozen_layers} > {len(blocks)} blocks", field="frozen_layers"
        )
    for block in blocks[: hp.frozen_layers]:
        for p in block.parameters():
            p.requires_grad_(False)
    first = _linear_head(model)
    if first is None:
        return model
    head: Any = model.head
    last: Any = head[-1] if isinstance(head, nn.Sequential) else head
    n_classes = int(getattr(model, "n_classes", None) or last.out_features)
    width = first.out_features if isinstance(head, nn.Sequential) else n_classes
    if hp.last_layer_neurons != n_classes and width != hp.last_layer_neurons:
        flat = first.in_features
        gen = torch.Generator().manual_seed(hp.last_layer_neurons)
        fresh = nn.Sequential(
            nn.Linear(flat, hp.last_layer_neurons),
            nn.ReLU(),
            nn.Linear(hp.last_layer_neurons, n_classes),
        )
        with torch.no_grad():
            for p in fresh.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / max(1, p.shape[-1])) ** 0.5)
        model.head = fresh.to(next(deployed.parameters()).device)
    return model


def validation_split(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(validation, training-pool) indices of a window of ``n`` labelled images: a random
    20%, at most 250 images, validates; the rest is the pool retraining draws from."""
    order = rng.permutation(n)
    n_val = min(n // 5, 250)
    return order[:n_val], order[n_val:]


def subset_indices(
    n: int, fraction: float, rng: np.random.Generator, minimum: int = 1
) -> np.ndarray:
    """Sorted indices of a uniform random ``fraction`` of ``range(n)`` (at least ``minimum``,
    at most ``n``): the samples a configuration with that data fraction trains on."""
    size = min(n, max(minimum, round(fraction * n)))
    return np.sort(rng.choice(n, size=size, replace=False))


def retrain(
    deployed: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    hp: RetrainingHyperparameters,
    epochs: int,
    seed: int = 0,
    lr: float = 0.05,
    val: tuple[np.ndarray, np.ndarray] | None = None,
    history: list[float] | None = None,
    keep_frozen: Collection[str] = (),
    after_epoch: Callable[[], object] | None = None,
) -> tuple[nn.Module, list[float], float]:
    """Retrain a copy for ``epochs``; returns (model, val accuracy per epoch, train seconds).

    With ``val``, the validation accuracy after each epoch is appended to ``history`` (a new
    list unless one is passed, so that a caller can watch it grow while training runs).
    ``after_epoch`` is called after each epoch, on the training thread.
    """
    model = build_retraining_model(deployed, hp, keep_frozen)
    history = [] if history is None else history
    spent = [0.0]
    mark = [time.perf_counter()]

    def on_epoch(epoch: int, loss: float) -> None:
        spent[0] += time.perf_counter() - mark[0]
        if val is not None:
            history.append(accuracy(model, val[0], val[1]))
        if after_epoch is not None:
            after_epoch()
        mark[0] = time.perf_counter()

    config = TrainConfig(lr=lr, batch_size=hp.batch_size)
    train_epochs(model, images, labels, epochs, config, seed=seed, on_epoch=on_epoch)
    return model, history, spent[0]


def fresh_blocks(n: int, size: int, epochs: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``epochs`` consecutive blocks of ``size`` indices into ``range(n)``, read off shuffled
    passes over ``range(n)`` (a new permutation whenever one is used up), so that every index
    appears once per pass: the order a full run's first ``epochs * size`` samples could take."""
    if size < 1 or n < 1:
        raise InvalidInputError(f"block size {size} and n {n} must be >= 1", field="size")
    order, pos = rng.permutation(n), 0
    out: list[np.ndarray] = []
    for _ in range(epochs):
        parts: list[np.ndarray] = []
        need = size
        while need > 0:
            if pos == n:
                order, pos = rng.permutation(n), 0
            take = min(need, n - pos)
            parts.append(order[pos : pos + take])
            pos += take
            need -= take
        out.append(np.concatenate(parts))
    return out


def _train_blocks(
    deployed: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    blocks: Sequence[np.ndarray],
    hp: RetrainingHyperparameters,
    settings: ProfileSettings,
    val: tuple[np.ndarray, np.ndarray],
    keep_frozen: Collection[str] = (),
    prefixes: dict[int, torch.Tensor] | None = None,
) -> tuple[list[float], float]:
    """One SGD run over ``blocks`` in turn (mini-batches of ``hp.batch_size`` in each, one
    optimizer throughout); returns (val accuracy after each block, train seconds).

    Validation reuses the frozen blocks' outputs on ``val``
    (:mod:`deepedge.learning.frozen_prefix`); ``prefixes`` (frozen block count -> outputs)
    shares them between runs on the same ``val``.
    """
    model = build_retraining_model(deployed, hp, keep_frozen)
    prefixes = {} if prefixes is None else prefixes
    score, prefix = make_scorer(
        model, hp.frozen_layers, val[0], val[1], prefixes.get(hp.frozen_layers)
    )
    if prefix is not None:
        prefixes[hp.frozen_layers] = prefix
    optimizer = make_optimizer(model, TrainConfig(lr=settings.lr, batch_size=hp.batch_size))
    device = next(model.parameters()).device
    x_all = torch.as_tensor(images, dtype=torch.float32, device=device)
    y_all = torch.as_tensor(labels, dtype=torch.long, device=device)
    accs: list[float] = []
    spent = 0.0
    for block in blocks:
        mark = time.perf_counter()
        for start in range(0, len(block), hp.batch_size):
            idx = torch.as_tensor(block[start : start + hp.batch_size], device=device)
            training_step(model, optimizer, x_all[idx], y_all[idx])
        spent += time.perf_counter() - mark
        accs.append(score(model))
    return accs, spent


def profile_epoch_size(
    pool_size: int, batch_size: int, epochs_total: int, settings: ProfileSettings
) -> int:
    """Samples of one profiling epoch (module docstring, step 1)::

        m = max(round(sample_fraction * n), B, min(min_steps * B, floor(c * E_sum * n / K)))

    for a pool of ``n`` samples, batch size ``B``, ``K = profile_epochs`` and ``c =
    max_cost_frac``: the paper's fraction, at least one batch, and ``min_steps`` batches
    unless those would process more than ``c`` of the samples of the exhaustive retrainings
    sharing the run (``E_sum`` epochs of ``n`` samples in all).
    """
    budget = int(settings.max_cost_frac * epochs_total * pool_size / settings.profile_epochs)
    floor = max(batch_size, min(settings.min_steps * batch_size, budget))
    return max(1, round(settings.sample_fraction * pool_size), floor)


def _run_key(hp: RetrainingHyperparameters) -> tuple[int, int, int, float]:
    """What a profiling run depends on: every knob but the epoch count."""
    return (hp.batch_size, hp.last_layer_neurons, hp.frozen_layers, hp.data_fraction)


def micro_profile(
    deployed: nn.Module,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    configs: Sequence[NamedConfig],
    settings: ProfileSettings | None = None,
    keep_frozen: Collection[str] = (),
) -> list[ConfigEstimate]:
    """Estimate accuracy after retraining and cost of every configuration (module docstring).

    ``keep_frozen`` names parameters no configuration trains (a workload's frozen layers).

    Configurations that differ only in their epoch count share one profiling run: the run
    does not depend on the epochs, only the point its curve is read at (and the cost's
    epoch factor) does. Each member of such a group is charged an equal part of the run's
    seconds. Estimates come back in the order of ``configs``.
    """
    settings = settings or ProfileSettings()
    groups: dict[tuple[int, int, int, float], list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(_run_key(cfg.hyperparameters), []).append(i)
    out: dict[int, ConfigEstimate] = {}
    prefixes: dict[int, torch.Tensor] = {}  # frozen blocks -> their outputs on ``val``
    for members in groups.values():
        hp = configs[members[0]].hyperparameters
        epochs_total = sum(configs[i].hyperparameters.epochs for i in members)
        run = _profile_run(
            deployed, train, val, hp, settings, members[0], epochs_total, keep_frozen, prefixes
        )
        for i in members:
            out[i] = run.estimate(configs[i], len(members))
            log.debug(
                "%s: predicted %.3f from %s", configs[i].name, out[i].predicted_accuracy, run.points
            )
    return [out[i] for i in range(len(configs))]


@dataclass(frozen=True)
class _ProfileRun:
    """One profiling run: its curve, its points and its measured costs."""

    curve: OptimusCurve
    points: tuple[tuple[float, float], ...]
    seconds_per_sample: float
    data_size: int
    seconds: float

    def estimate(self, cfg: NamedConfig, sharers: int) -> ConfigEstimate:
        hp = cfg.hyperparameters
        predicted = float(self.curve.predict(hp.epochs))
        return ConfigEstimate(
            name=cfg.name,
            hyperparameters=hp,
            curve=self.curve,
            points=self.points,
            predicted_accuracy=min(1.0, max(0.0, predicted)),
            estimated_gpu_seconds=self.seconds_per_sample * hp.epochs * self.data_size,
            seconds_per_sample=self.seconds_per_sample,
            data_size=self.data_size,
            profile_seconds=self.seconds / sharers,
        )


def _profile_run(
    deployed: nn.Module,
    train: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    hp: RetrainingHyperparameters,
    settings: ProfileSettings,
    index: int,
    epochs_total: int,
    keep_frozen: Collection[str] = (),
    prefixes: dict[int, torch.Tensor] | None = None,
) -> _ProfileRun:
    """Steps 1-3 of the module docstring for one run; ``index`` seeds its sampling and
    ``epochs_total`` is the sum of the epochs of the configurations sharing the run."""
    images, labels = train
    rng = np.random.default_rng([settings.seed, index])
    pool = subset_indices(len(labels), hp.data_fraction, rng)
    epochs = settings.profile_epochs
    t0 = time.perf_counter()
    size = profile_epoch_size(len(pool), hp.batch_size, epochs_total, settings)
    if settings.draw is SampleDraw.FIXED:
        sample = pool[subset_indices(len(pool), settings.sample_fraction, rng, size)]
        size = len(sample)
        _, accs, train_s = retrain(
            deployed,
            images[sample],
            labels[sample],
            hp,
            epochs,
            settings.seed,
            settings.lr,
            val,
            keep_frozen=keep_frozen,
        )
    else:
        blocks = [pool[b] for b in fresh_blocks(len(pool), size, epochs, rng)]
        accs, train_s = _train_blocks(
            deployed, images, labels, blocks, hp, settings, val, keep_frozen, prefixes
        )
    seconds = time.perf_counter() - t0
    per_epoch = size / len(pool)
    xs = [
        (k if settings.axis is ExtrapolationAxis.EPOCHS else k * per_epoch)
        for k in range(1, epochs + 1)
    ]
    return _ProfileRun(
        curve=fit_optimus(xs, accs),
        points=tuple(zip(xs, accs, strict=True)),
        seconds_per_sample=train_s / (epochs * size),
        data_size=len(pool),
        seconds=seconds,
    )


def projected_accuracy(history: Sequence[float], total_epochs: int) -> float | None:
    """Accuracy a running retraining will reach after ``total_epochs``, from its epochs so far.

    Fits the Optimus curve to the validation accuracies seen (epoch ``k`` = 1, 2, ...) and
    reads it at ``total_epochs``; None before two epochs.
    """
    if len(history) < 2:
        return None
    curve = fit_optimus(list(range(1, len(history) + 1)), list(history))
    return min(1.0, max(0.0, float(curve.predict(total_epochs))))
