"""Benchmark of the distributed model update: ``python -m deepedge.bench.update [--quick]``.

Four measurements, side by side in one run, on the **emulated** paper testbed (1 TX2 and
3 Nano workers as Ray actors that run real torch steps, paced to the device catalog's
modelled step times; a Pi 4 parameter server):

1. **Speedup.** The same data trained for the same epochs with the Deep-Edge plan
   (Algorithm 1 on noisy estimates) and with equal shards over all workers (fair); the
   measured wall-clock epoch times are compared (median over epochs). The Deep-Edge
   plan's background-app deadlines are checked on the noise-free catalog.
2. **PS overhead.** One worker training through the PS actor (no pacing) against a plain
   single-process torch loop (same model, data, batch, SGD with momentum, one thread, in
   a Ray worker process too), in interleaved rounds; the fastest steady-state epoch of
   each side. The headline uses the update's defaults: pushes over the PS's gradient
   channel (a direct socket between the two actor processes) from a background push
   thread with at most one unanswered push. The full run shows, side by side, the same
   channel with window 0 (wait for each reply) and pushes as Ray actor calls.
3. **Recovery.** A model trained before the drift loses accuracy on the drifted regime;
   the update (golden labels, Deep-Edge plan, async PS, dynamic stopping) must win back
   ``recovered_frac = (acc_updated - acc_stale) / (acc_before - acc_stale)`` of it
   (``acc_updated``: the mean over the update seeds).
4. **Fault injection.** Per seed, the same update with nano-1 crashed mid-update: it must
   complete, record the strike, and end within 2 points of the unfailed run;
   ``fault_acc_delta`` is the largest accuracy difference (absolute value) over the
   seeds, each seed's pair shown too.

Accuracies are scored on held-out images with true labels (1,800 of the drifted regime).

Last line: ``RESULT speedup=... ps_throughput_ratio=... recovered_frac=... fault_acc_delta=...``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from deepedge.bench.report import machine_description, result_line, table
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, make_edge_model, set_flat_weights
from deepedge.learning.stream import DriftConfig, DriftingStream, Window, load_digits_images
from deepedge.learning.training import (
    TrainConfig,
    accuracy,
    predict,
    train_epochs,
    train_golden,
)
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding import Planner
from deepedge.planning.sharding.cost_model import evaluate_plan
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.baseline import plain_loop
from deepedge.runtime.session import ray_session
from deepedge.runtime.testbed import deep_edge_planner, fair_planner, paper_testbed
from deepedge.runtime.update import (
    FaultInjection,
    PushTransport,
    UpdateConfig,
    UpdateResult,
    run_model_update,
)
from deepedge.runtime.worker import WorkerEpochStats


@dataclass(frozen=True)
class Scale:
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
FULL = Scale(400, 4000, 20, 3, 800, 3, 0.05, 2048, 4, 128, 3, 40, 3)
QUICK = Scale(120, 1000, 3, 1, 160, 1, 0.02, 256, 1, 64, 1, 3, 1)


Data = tuple[np.ndarray, np.ndarray]


def _run(
    cluster: ClusterSpec,
    data: Data,
    val: Data,
    factory: Callable[[], nn.Module],
    weights: np.ndarray,
    planner: Planner,
    config: UpdateConfig,
) -> UpdateResult:
    with tempfile.TemporaryDirectory() as ckpt:
        return run_model_update(
            cluster,
            data,
            val,
            factory,
            weights,
            Path(ckpt),
            planner=planner,
            config=config,
            resume=False,
        )


def measure_speedup(
    scale: Scale, data: Data, val: Data, factory: Callable[[], nn.Module], weights: np.ndarray
) -> dict[str, float]:
    cluster = paper_testbed(len(data[1]))
    fixed = StoppingRule(min_epochs=2, max_epochs=scale.speed_epochs, min_gain=0.0)
    config = UpdateConfig(time_scale=scale.time_scale, stopping=fixed)
    out: dict[str, float] = {}
    catalog = DeviceCatalog()
    for name, planner in (("deep-edge", deep_edge_planner()), ("fair", fair_planner())):
        result = _run(cluster, data, val, factory, weights, planner, config)
        walls = [e.wall_s for e in result.epochs]
        truth = evaluate_plan(cluster, result.plan, catalog)
        out[f"{name}_epoch_s"] = statistics.median(walls)
        out[f"{name}_model_epoch_s"] = truth.epoch_time_s * scale.time_scale
        out[f"{name}_violations"] = truth.violations
        out[f"{name}_overruns"] = sum(w.overruns for e in result.epochs for w in e.workers)
        out[f"{name}_workers"] = len(result.plan.selected_ids)
    out["speedup"] = out["fair_epoch_s"] / out["deep-edge_epoch_s"]
    out["model_speedup"] = out["fair_model_epoch_s"] / out["deep-edge_model_epoch_s"]
    return out


PSVariant = tuple[PushTransport, int]  # how pushes travel, push window


def variant_key(variant: PSVariant) -> str:
    transport, window = variant
    return f"{transport.value}-w{window}"


def measure_ps_overhead(
    scale: Scale, x: np.ndarray, y: np.ndarray, variants: tuple[PSVariant, ...], rounds: int
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
    plan = ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=n,
        workers=[WorkerAssignment(id="tx2-1", selected=True, shard=n, batch_size=scale.ps_batch)]
        + [
            WorkerAssignment(id=w, selected=False, shard=0, batch_size=0)
            for w in ("nano-1", "nano-2", "nano-3")
        ],
    )
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
                with tempfile.TemporaryDirectory() as ckpt:
                    result = run_model_update(
                        paper_testbed(n),
                        (x, y),
                        (x[:64], y[:64]),
                        factory,
                        get_flat_weights(factory()),
                        Path(ckpt),
                        plan=plan,
                        config=replace(
                            defaults,
                            time_scale=0.0,
                            stopping=fixed,
                            push_window=window,
                            transport=transport,
                        ),
                        resume=False,
                    )
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


def _ps_rows(
    ps: dict[str, float], scale: Scale, variants: tuple[PSVariant, ...]
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
    scale: Scale,
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
    cluster = paper_testbed(len(train[1]))
    # Look 5 epochs ahead: with 3 the noisy asynchronous curve stopped a run ~3 points
    # under the plateau that a restarted run of the same update reached.
    rule = StoppingRule(max_epochs=scale.update_max_epochs, horizon_epochs=5, min_gain=0.005)
    runs: list[tuple[int, UpdateResult, UpdateResult | None]] = []
    for seed in range(first_seed, first_seed + scale.accuracy_seeds):
        config = UpdateConfig(time_scale=0.005, stopping=rule, seed=seed)
        clean = _run(cluster, train, val, factory, weights, deep_edge_planner(), config)
        faulty = None
        if with_fault:
            nano = next(w for w in clean.plans[0].workers if w.id == "nano-1" and w.selected)
            steps = -(-nano.shard // nano.batch_size)
            crash_step = steps * (len(clean.accuracies) // 2) + max(1, steps // 2)
            faulty = _run(
                cluster,
                train,
                val,
                factory,
                weights,
                deep_edge_planner(),
                replace(config, faults=(FaultInjection("nano-1", after_steps=crash_step),)),
            )
        runs.append((seed, clean, faulty))
    return runs


MEASUREMENTS = ("speedup", "ps", "recovery", "fault")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``measure`` is resolved to the chosen measurements in canonical
    order (all four when none is named)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for tests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument(
        "--address", default=None, help="Ray cluster to join (default: $RAY_ADDRESS, else local)"
    )
    parser.add_argument(
        "--measure",
        action="append",
        choices=MEASUREMENTS,
        help="run only these measurements (repeatable; default: all four, side by side). "
        "The RESULT line then carries only their keys.",
    )
    args = parser.parse_args(argv)
    named = set(args.measure or MEASUREMENTS)
    args.measure = tuple(m for m in MEASUREMENTS if m in named)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = set(args.measure)
    scale = QUICK if args.quick else FULL
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # as the workers: one thread each, and robust on a busy host
    stream = DriftingStream(
        load_digits_images(16), DriftConfig(seed=args.seed, window_size=scale.window_size)
    )
    factory = functools.partial(make_edge_model, 10, 16, 8, args.seed)
    before = [stream.window(t) for t in (0, 1)]
    base = factory()
    train_epochs(
        base,
        np.concatenate([w.images for w in before]),
        np.concatenate([w.labels for w in before]),
        8,
        TrainConfig(),
        seed=args.seed,
    )
    drifted = [stream.window(t) for t in (4, 5)]
    x = np.concatenate([w.images for w in drifted])
    labelled = chosen & {"recovery", "fault"}
    if labelled:  # the golden model labels the drifted windows (Ekya's ground-truth stand-in)
        xa, ya = stream.augmented_pool(scale.golden_pool, seed=args.seed)
        golden = train_golden(
            xa, ya, 10, 16, scale.golden_epochs, scale.golden_members, args.seed, device="cpu"
        )
        y_train = predict(golden, x)
    else:  # speed measurements only: the labels do not change the timings
        y_train = np.concatenate([w.labels for w in drifted])
    order = np.random.default_rng(args.seed).permutation(len(x))
    n_val = len(x) // 5
    val = (x[order[:n_val]], y_train[order[:n_val]])
    train = (x[order[n_val:]], y_train[order[n_val:]])
    weights = get_flat_weights(base)
    rows: list[list[object]] = []
    results: dict[str, float] = {}
    with ray_session(args.cpus, args.address):
        if "speedup" in chosen:
            sp_data = (train[0][: scale.speed_samples], train[1][: scale.speed_samples])
            speed = measure_speedup(scale, sp_data, val, factory, weights)
            results["speedup"] = speed["speedup"]
            rows += _speedup_rows(speed)
        if "ps" in chosen:
            # Speed only: more drifted windows (true labels) so that an epoch has
            # ps_samples samples and the per-epoch pull does not dominate a short epoch.
            ps_extra = max(0, -(-scale.ps_samples // scale.window_size) - len(drifted))
            ps_windows = [*drifted, *(stream.window(t) for t in range(6, 6 + ps_extra))]
            ps_x = np.concatenate([w.images for w in ps_windows])[: scale.ps_samples]
            ps_y = np.concatenate([w.labels for w in ps_windows])[: scale.ps_samples]
            defaults = UpdateConfig()
            default: PSVariant = (defaults.transport, defaults.push_window)
            # --quick measures the update's default only; the full run also the
            # synchronous variant (window 0) and pushes as Ray actor calls, side by side
            # in the same rounds.
            variants: tuple[PSVariant, ...] = (default,)
            if not args.quick:
                variants = tuple(
                    dict.fromkeys(
                        (
                            default,
                            (defaults.transport, 0),
                            (PushTransport.RAY_CALL, defaults.push_window),
                        )
                    )
                )
            ps = measure_ps_overhead(scale, ps_x, ps_y, variants, scale.ps_rounds)
            results["ps_throughput_ratio"] = ps[f"{variant_key(default)}_ratio"]
            rows += _ps_rows(ps, scale, variants)
        if labelled:
            runs = measure_accuracy(
                scale, train, val, factory, weights, "fault" in chosen, args.seed
            )
    if labelled:
        # Held-out images (true labels, never trained on): the old regime is windows 0-1,
        # the drifted regime windows 4-9 (full drift, one class mix), 1,800 images, so
        # one image is 0.06 points.
        old_eval = _eval_set([stream.window(t) for t in (0, 1)])
        new_eval = _eval_set([*drifted, *(stream.window(t) for t in range(6, 10))])
        rows += _accuracy_rows(
            factory, base, golden, old_eval, new_eval, runs, "recovery" in chosen, results
        )
    print(
        f"# deepedge.bench.update{' --quick' if args.quick else ''} on "
        f"{machine_description()}; devices EMULATED (time scale x{scale.time_scale:g})"
    )
    print(table(["measurement", "value"], rows))
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    keys = ("speedup", "ps_throughput_ratio", "recovered_frac", "fault_acc_delta")
    print(result_line({k: results[k] for k in keys if k in results}))


def _speedup_rows(speed: dict[str, float]) -> list[list[object]]:
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


def _eval_set(windows: list[Window]) -> Data:
    return (
        np.concatenate([w.eval_images for w in windows]),
        np.concatenate([w.eval_labels for w in windows]),
    )


def _accuracy_rows(
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


if __name__ == "__main__":
    main()
