"""The measurements of ``python -m deepedge.bench.workloads`` (see that module's docstring).

Each function measures one figure on a given workload (model factory + data) and returns
plain numbers; :mod:`deepedge.bench.workloads` prepares the data and prints the table.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import psutil
from torch import nn

from deepedge.bench.harness.microprofile import MicroprofileResult, ProfilePair
from deepedge.bench.harness.testbed import Data, Factory, one_worker_plan, run_update
from deepedge.bench.plain_loop import plain_loop
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.microprofiler import (
    NamedConfig,
    ProfileSettings,
    micro_profile,
    retrain,
    subset_indices,
    validation_split,
)
from deepedge.learning.models import get_flat_weights, set_flat_weights
from deepedge.learning.training import accuracy
from deepedge.runtime.training.gradient_channel import GradientEncoding
from deepedge.runtime.training.testbed import deep_edge_planner
from deepedge.runtime.training.update import UpdateConfig, UpdateResult
from deepedge.runtime.training.worker import WorkerEpochStats


def measure_ps_ratio(
    factory: Factory,
    data: Data,
    batch: int,
    epochs: int,
    rounds: int,
    encodings: Sequence[GradientEncoding] = (GradientEncoding.FLOAT32,),
) -> dict[str, float]:
    """Samples/s of one worker through the PS vs the plain torch loop, same data and batch.

    As :func:`deepedge.bench.update_parts.measure_ps_overhead`: ``rounds`` times, side by side,
    the plain loop (a Ray actor started like a worker, one torch thread) then one update
    through the PS per gradient encoding (the update's real path: PS and worker actors,
    the gradient channel, push window 1, no pacing); a last plain run closes the last
    round. Each run's first epoch is dropped; each side's figure is its fastest
    steady-state epoch. ``{encoding}_ratio`` is PS samples/s over plain samples/s.
    """
    x, y = data
    n = len(y)
    plan = one_worker_plan(n, batch)
    fixed = StoppingRule(min_epochs=2, max_epochs=epochs + 1, min_gain=0.0)
    defaults = UpdateConfig()
    weights = get_flat_weights(factory())
    plain_walls: list[float] = []
    stats: dict[GradientEncoding, list[WorkerEpochStats]] = {e: [] for e in encodings}
    with plain_loop(factory, x, y, defaults.lr, defaults.momentum) as plain_epoch_walls:
        for round_no in range(rounds + 1):
            plain_walls += plain_epoch_walls(batch, epochs + 1)[1:]
            for encoding in encodings if round_no < rounds else ():
                config = replace(
                    defaults, time_scale=0.0, stopping=fixed, gradient_encoding=encoding
                )
                result = run_update(data, (x[:32], y[:32]), factory, weights, config, plan=plan)
                stats[encoding] += [s for e in result.epochs[1:] for s in e.workers]
    steps = -(-n // batch)
    plain_tput = n / min(plain_walls)
    out = {"plain_samples_per_s": plain_tput, "plain_step_ms": 1000 * min(plain_walls) / steps}
    for encoding, runs in stats.items():
        key = encoding.value
        out[f"{key}_samples_per_s"] = n / min(s.wall_s for s in runs)
        out[f"{key}_ratio"] = out[f"{key}_samples_per_s"] / plain_tput
        out[f"{key}_step_ms"] = 1000 * min(s.wall_s for s in runs) / steps
        out[f"{key}_on_ps_ms"] = 1000 * statistics.median(s.ps_round_trip_s / s.steps for s in runs)
    return out


class PssSampler:
    """Peak over time of the **summed** proportional set size (PSS) of this driver's PS
    and worker actor processes (descendants of this process whose title starts with
    ``ray::ParameterServer`` or ``ray::TrainingWorker``), sampled every ``period_s``.

    Unlike the sum of each process's own peak resident set, pages shared between the
    processes (the torch and Ray libraries, objects in Ray's store) count once in total,
    and the peaks must coincide in time to add up. A sampled peak can miss a transient
    shorter than ``period_s``: it is a lower bound of the true peak of the sum.
    """

    PREFIXES = ("ray::ParameterServer", "ray::TrainingWorker")

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = period_s
        self.peak_mb = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pss-sampler", daemon=True)

    def __enter__(self) -> PssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            total, found = 0.0, False
            for proc in psutil.Process().children(recursive=True):
                try:
                    title = " ".join(proc.cmdline())
                    if not title.startswith(self.PREFIXES):
                        continue
                    total += float(getattr(proc.memory_full_info(), "pss", 0.0)) / 2**20
                    found = True
                except (psutil.Error, OSError):  # a process that ended meanwhile
                    continue
            if found:
                self.peak_mb = max(self.peak_mb, total)
                self.samples += 1


@dataclass(frozen=True)
class RecoveryRun:
    name: str
    accuracy: float  # held-out drifted images, true labels
    epochs: int
    stop: str
    wall_s: float
    peak_mem_mb: float  # PS + workers, sum of each process's peak resident set
    pss_mb: float  # PS + workers, proportional set at the end
    workers: int
    # (process, its peak resident set in MiB): the PS, then each worker
    peaks_mb: tuple[tuple[str, float], ...] = ()
    pss_peak_mb: float = 0.0  # peak of the summed PSS, sampled (PssSampler)


def measure_recovery(
    variants: Sequence[tuple[str, Factory, UpdateConfig]],
    train: Data,
    val: Data,
    weights: np.ndarray,
    new_eval: Data,
    seed: int,
) -> list[RecoveryRun]:
    """Per variant (name, factory, update config: stopping rule, SGD, gradient encoding):
    one update of the stale model on the drifted data (Deep-Edge plan on the emulated
    testbed, host speed, dynamic stopping), scored on held-out drifted images."""
    runs: list[RecoveryRun] = []
    for name, factory, variant in variants:
        config = replace(variant, time_scale=0.0, seed=seed)
        started = time.perf_counter()
        with PssSampler() as pss:
            result = run_update(train, val, factory, weights, config, planner=deep_edge_planner())
        wall_s = time.perf_counter() - started
        model = factory()
        set_flat_weights(model, result.weights)
        runs.append(
            RecoveryRun(
                name,
                accuracy(model, *new_eval),
                len(result.accuracies),
                result.stop_reason.value,
                wall_s,
                result.peak_rss_mb,
                result.pss_mb,
                len(result.plan.selected_ids),
                _peaks_by_process(result),
                pss.peak_mb,
            )
        )
    return runs


def _peaks_by_process(result: UpdateResult) -> tuple[tuple[str, float], ...]:
    """Each process's peak resident set (MiB) in ``result``'s last launch: PS, then workers."""
    workers: dict[str, float] = {}
    for record in result.epochs:
        for w in record.workers:
            workers[w.worker_id] = max(workers.get(w.worker_id, 0.0), w.peak_rss_mb)
    return (("ps", result.ps_peak_rss_mb), *sorted(workers.items()))


def measure_microprofile(
    deployed: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    held_out: Data,
    configs: Sequence[NamedConfig],
    seed: int,
    settings: ProfileSettings | None = None,
    *,
    window: int,
) -> MicroprofileResult:
    """The micro-profiler against exhaustive retraining on one drifted window (the stream's
    ``window``, whose images and labels are given), as part 4 of
    the Ekya benchmark (:mod:`deepedge.bench.ekya_microprofile`): estimates from 5
    profiling epochs of 10 % of each configuration's data, at least ``min_steps`` SGD steps
    each (``settings``, default :class:`ProfileSettings` with ``seed``); the truth from the full
    retraining, scored on the window's held-out images; cost = wall seconds of profiling
    (validation included) over wall seconds of the exhaustive retrainings."""
    val_idx, pool_idx = validation_split(len(labels), np.random.default_rng([seed, 4]))
    val = (images[val_idx], labels[val_idx])
    train = (images[pool_idx], labels[pool_idx])
    started = time.perf_counter()
    settings = settings or ProfileSettings(seed=seed)
    estimates = micro_profile(deployed, train, val, configs, settings)
    profile_s = time.perf_counter() - started
    pairs: list[ProfilePair] = []
    exhaustive_s = 0.0
    for i, (cfg, est) in enumerate(zip(configs, estimates, strict=True)):
        hp = cfg.hyperparameters
        rng = np.random.default_rng([seed, 4, i])
        n = len(train[1])
        pool = subset_indices(n, hp.data_fraction, rng)
        t0 = time.perf_counter()
        model, _, train_s = retrain(deployed, train[0][pool], train[1][pool], hp, hp.epochs, seed)
        exhaustive_s += time.perf_counter() - t0
        actual = accuracy(model, *held_out)
        pairs.append(ProfilePair(window, cfg.name, est.predicted_accuracy, actual,
                                 est.estimated_gpu_seconds, train_s))  # fmt: skip
    return MicroprofileResult(tuple(pairs), profile_s, exhaustive_s)
