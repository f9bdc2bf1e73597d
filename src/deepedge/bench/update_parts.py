"""The measurements of ``python -m deepedge.bench.update`` (its module docstring says what
each one measures): sizes, the runs behind each measurement and their table rows."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from torch import nn

from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.testbed import Data, one_worker_plan, run_update
from deepedge.bench.plain_loop import plain_loop
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model, set_flat_weights
from deepedge.learning.stream import Window
from deepedge.learning.training import accuracy
from deepedge.runtime.training.testbed import deep_edge_planner
from deepedge.runtime.training.update import (
    FaultInjection,
    PushTransport,
    UpdateConfig,
    UpdateResult,
)
from deepedge.runtime.training.worker import WorkerEpochStats


@dataclass(frozen=True)
class UpdateScale(Scale):
    window_size: int
    golden_pool: int
    golden_epochs: int
    golden_members: int
    speed_samples: int
    speed_epochs: int
    time_scale: float
    ps_samples: int
    ps_epochs: int
    ps_batch: int
    ps_rounds: int
    update_max_epochs: int
    accuracy_seeds: int  # update seeds for recovery and fault (a clean and a faulty run each)


# The golden ensemble (3 CNNs) trains 20 epochs on the augmented pool: its labels cap the
# update's accuracy, and 8 epochs left it 4 points less right on the drifted window.
SCALES = Sizes(
    full=UpdateScale(window_size=400, golden_pool=4000, golden_epochs=20, golden_members=3,
                     speed_samples=800, speed_epochs=3, time_scale=0.05, ps_samples=2048,
                     ps_epochs=4, ps_batch=128, ps_rounds=3, update_max_epochs=40,
                     accuracy_seeds=3),
    quick=UpdateScale(window_size=120, golden_pool=1000, golden_epochs=3, golden_members=1,
                      speed_samples=160, speed_epochs=1, time_scale=0.02, ps_samples=256,
                      ps_epochs=1, ps_batch=64, ps_rounds=1, update_max_epochs=3,
                      accuracy_seeds=1),
)  # fmt: skip


PSVariant = tuple[PushTransport, int]  # how pushes travel, push window


def variant_key(variant: PSVariant) -> str:
    transport, window = variant
    return f"{transport.value}-w{window}"


def measure_ps_overhead(
    scale: UpdateScale, x: np.ndarray, y: np.ndarray, variants: tuple[PSVariant, ...], rounds: int
) -> dict[str, float]:
    """Samples/s of one worker through the PS vs the plain loop, same data and batch.

    ``rounds`` times, side by side: the plain loop (a Ray actor started like a worker, one
    torch thread, kept for all rounds), then one update through the PS actor per
    (transport, push window) in ``variants`` (the update's real path: PS and worker
    actors, no pacing, same model, data, batch, lr and momentum); a last plain run closes
    the last round.
    Each run's first epoch is dropped (start-up, shard loading, allocator warm-up). On a
    shared host the epochs' times are noisy; each side's figure is its fastest
    steady-state epoch (the timeit convention: the least disturbed measurement); the
    plain side gets one run more to pick from. Per-step medians of the worker's compute
    and of the time it spent on the PS are reported too.
    """
    factory = functools.partial(make_edge_model, 10, 16, 8, 0)
    n = len(y)
    plan = one_worker_plan(n, scale.ps_batch)
    fixed = StoppingRule(min_epochs=2, max_epochs=scale.ps_epochs + 1, min_gain=0.0)
    steps = -(-n // scale.ps_batch)
    plain_walls: list[float] = []
    ps_stats: dict[PSVariant, list[WorkerEpochStats]] = {v: [] for v in variants}
    defaults = UpdateConfig()
    with plain_loop(factory, x, y, defaults.lr, defaults.momentum) as plain_epoch_walls:
        for round_no in range(rounds + 1):
            # plain, then each PS variant; a last plain run closes the last round
            plain_walls += plain_epoch_walls(scale.ps_batch, scale.ps_epochs + 1)[1:]
            for transport, window in variants if round_no < rounds else ():
                config = replace(defaults, time_scale=0.0, stopping=fixed, push_window=window,
                                 transport=transport)  # fmt: skip
                weights = get_flat_weights(factory())
                result = run_update((x, y), (x[:64], y[:64]), factory, weights, config, plan=plan)
                ps_stats[(transport, window)] += [s for e in result.epochs[1:] for s in e.workers]
    plain_tput = n / min(plain_walls)
    out = {
        "plain_samples_per_s": plain_tput,
        "plain_step_ms": 1000 * statistics.median(plain_walls) / steps,
        "samples": n,
    }
    for variant, stats in ps_stats.items():
        key = variant_key(variant)
        tput = n / min(s.wall_s for s in stats)
        out[f"{key}_samples_per_s"] = tput
        out[f"{key}_ratio"] = tput / plain_tput
        out[f"{key}_step_ms"] = 1000 * statistics.median(s.wall_s / s.steps for s in stats)
        out[f"{key}_compute_ms"] = 1000 * statistics.median(s.compute_s / s.steps for s in stats)
        out[f"{key}_on_ps_ms"] = 1000 * statistics.median(
            s.ps_round_trip_s / s.steps for s in stats
        )
    return out


def ps_rows(
    ps: dict[str, float], scale: UpdateScale, variants: tuple[PSVariant, ...]
) -> list[list[object]]:
    batch = scale.ps_batch
    rows: list[list[object]] = [
        [
            f"plain torch loop, samples/s (batch {batch}, {ps['samples']:.0f} samples)",
            ps["plain_samples_per_s"],
        ],
        ["plain torch loop, ms per step (median)", ps["plain_step_ms"]],
    ]
    for transport, w in variants:
        key = variant_key((transport, w))
        how = "waits for each reply" if w == 0 else f"push window {w}, background push thread"
        name = f"{transport.value}, {how}"
        rows += [
            [f"through PS ({name}), samples/s", ps[f"{key}_samples_per_s"]],
            [
                f"through PS ({name}): ms per step / compute / on the PS (medians)",
                f"{ps[f'{key}_step_ms']:.2f} / {ps[f'{key}_compute_ms']:.2f} / "
                f"{ps[f'{key}_on_ps_ms']:.2f}",
            ],
            [f"PS throughput ratio ({name})", ps[f"{key}_ratio"]],
            [
                f"per-step ratio, plain / through PS ({name}; medians, steady-state epochs)",
                ps["plain_step_ms"] / ps[f"{key}_step_ms"],
            ],
        ]
    return rows


def measure_accuracy(
    scale: UpdateScale,
    train: Data,
    val: Data,
    factory: Callable[[], nn.Module],
    weights: np.ndarray,
    with_fault: bool,
    first_seed: int,
) -> list[tuple[int, UpdateResult, UpdateResult | None]]:
    """Per seed: the update, and (``with_fault``) the same update with nano-1 crashed.

    Both runs of a seed share data, plan, initial weights and stopping rule; the crash
    comes mid-update, in the middle of the epoch half-way through the clean run's epochs,
    so the restart resumes from a checkpoint with weights, momentum and version.
    """
    # Look 5 epochs ahead: with 3 the noisy asynchronous curve stopped a run ~3 points
    # under the plateau that a restarted run of the same update reached.
    rule = StoppingRule(max_epochs=scale.update_max_epochs, horizon_epochs=5, min_gain=0.005)
    runs: list[tuple[int, UpdateResult, UpdateResult | None]] = []
    for seed in range(first_seed, first_seed + scale.accuracy_seeds):
        config = UpdateConfig(time_scale=0.005, stopping=rule, seed=seed)
        clean = run_update(train, val, factory, weights, config, planner=deep_edge_planner())
        faulty = None
        if with_fault:
            nano = next(w for w in clean.plans[0].workers if w.id == "nano-1" and w.selected)
            steps = -(-nano.shard // nano.batch_size)
            crash_step = steps * (len(clean.accuracies) // 2) + max(1, steps // 2)
            faults = (FaultInjection("nano-1", after_steps=crash_step),)
            faulty = run_update(train, val, factory, weights, replace(config, faults=faults),
                                planner=deep_edge_planner())  # fmt: skip
        runs.append((seed, clean, faulty))
    return runs


def speedup_rows(speed: dict[str, float]) -> list[list[object]]:
    return [
        ["epoch time, Deep-Edge plan (s, measured)", speed["deep-edge_epoch_s"]],
        ["epoch time, fair plan (s, measured)", speed["fair_epoch_s"]],
        ["speedup (measured)", speed["speedup"]],
        ["speedup (catalog ground truth x time scale)", speed["model_speedup"]],
        [
            "workers Deep-Edge / fair",
            f"{speed['deep-edge_workers']:.0f} / {speed['fair_workers']:.0f}",
        ],
        [
            "deadline violations Deep-Edge / fair (ground truth)",
            f"{speed['deep-edge_violations']:.0f} / {speed['fair_violations']:.0f}",
        ],
        [
            "host-bound steps Deep-Edge / fair",
            f"{speed['deep-edge_overruns']:.0f} / {speed['fair_overruns']:.0f}",
        ],
    ]


def eval_set(windows: list[Window]) -> Data:
    return (
        np.concatenate([w.eval_images for w in windows]),
        np.concatenate([w.eval_labels for w in windows]),
    )


def accuracy_rows(
    factory: Callable[[], nn.Module],
    base: nn.Module,
    golden: nn.Module,
    old_eval: Data,
    new_eval: Data,
    runs: list[tuple[int, UpdateResult, UpdateResult | None]],
    with_recovery: bool,
    results: dict[str, float],
) -> list[list[object]]:
    """Accuracies on held-out images; fills ``recovered_frac`` and ``fault_acc_delta``.

    Over the seeds ``s`` of ``runs``: ``recovered_frac = (mean_s acc_clean - acc_stale) /
    (acc_before - acc_stale)`` and ``fault_acc_delta = max_s |acc_fault - acc_clean|``, the
    most a crash cost (or gained) in any seed, so that differences of opposite sign cannot
    cancel; each seed's pair and the mean are listed as well.
    """
    acc_before = accuracy(base, *old_eval)
    acc_stale = accuracy(base, *new_eval)
    evaluator = factory()

    def acc_of(result: UpdateResult) -> float:
        set_flat_weights(evaluator, result.weights)
        return accuracy(evaluator, *new_eval)

    rows: list[list[object]] = [
        [f"accuracy before drift (old regime, {len(old_eval[1])} images)", acc_before],
        [f"accuracy of the stale model (drifted regime, {len(new_eval[1])} images)", acc_stale],
        ["golden model accuracy (drifted regime)", accuracy(golden, *new_eval)],
    ]
    clean_accs: list[float] = []
    deltas: list[float] = []
    for seed, clean, faulty in runs:
        clean_accs.append(acc_of(clean))
        rows.append(
            [
                f"seed {seed}: accuracy after update ({len(clean.accuracies)} epochs, "
                f"{clean.stop_reason.value})",
                clean_accs[-1],
            ]
        )
        if faulty is not None:
            crash = faulty.failures[0].epoch if faulty.failures else 0
            deltas.append(acc_of(faulty) - clean_accs[-1])
            rows.append(
                [
                    f"seed {seed}: with nano-1 crashed in epoch {crash} ("
                    f"{len(faulty.accuracies)} epochs, restarts {faulty.restarts}, "
                    f"strikes {faulty.strikes})",
                    clean_accs[-1] + deltas[-1],
                ]
            )
    mean_clean = statistics.fmean(clean_accs)
    if with_recovery:
        results["recovered_frac"] = (mean_clean - acc_stale) / max(1e-9, acc_before - acc_stale)
        rows += [
            [f"mean accuracy after update ({len(clean_accs)} seeds)", mean_clean],
            ["recovered fraction (of the mean)", results["recovered_frac"]],
        ]
    if deltas:
        results["fault_acc_delta"] = max(abs(d) for d in deltas)
        rows += [
            ["fault - clean accuracy per seed", " ".join(f"{d:+.4f}" for d in deltas)],
            ["|mean (fault - clean)|", abs(statistics.fmean(deltas))],
            ["max |fault - clean| over the seeds", results["fault_acc_delta"]],
        ]
    return rows
