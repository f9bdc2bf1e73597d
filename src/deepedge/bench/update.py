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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.testbed import Data, measure_speedup
from deepedge.bench.update_parts import (
    SCALES,
    PSVariant,
    UpdateScale,
    accuracy_rows,
    eval_set,
    measure_accuracy,
    measure_ps_overhead,
    ps_rows,
    speedup_rows,
    variant_key,
)
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.stream import DriftConfig, DriftingStream, Window, load_digits_images
from deepedge.learning.training import TrainConfig, predict, train_epochs, train_golden
from deepedge.runtime.cluster.session import ray_session
from deepedge.runtime.training.update import PushTransport, UpdateConfig, UpdateResult

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


@dataclass(frozen=True)
class Prepared:
    """The data every measurement shares: a model trained before the drift and the
    drifted windows it is updated on (labelled by the golden model when one is trained)."""

    stream: DriftingStream
    factory: Callable[[], nn.Module]
    base: nn.Module  # trained on windows 0-1, before the drift
    weights: np.ndarray  # its flat weights: every update starts from them
    drifted: list[Window]  # windows 4-5
    train: Data
    val: Data
    golden: nn.Module | None  # None: speed only, the drifted windows' true labels


@dataclass
class Findings:
    """What the measurements produce: table rows and RESULT values, in order."""

    rows: list[list[object]] = field(default_factory=list)
    results: dict[str, float] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    chosen = set(args.measure)
    scale = SCALES.pick(args.quick)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # as the workers: one thread each, and robust on a busy host
    data = prepare(scale, args.seed, labelled=bool(chosen & {"recovery", "fault"}))
    findings = Findings()
    runs = None
    with ray_session(args.cpus, args.address):
        if "speedup" in chosen:
            speedup_part(scale, data, findings)
        if "ps" in chosen:
            ps_part(scale, data, args.quick, findings)
        if data.golden is not None:
            runs = measure_accuracy(
                scale, data.train, data.val, data.factory, data.weights, "fault" in chosen,
                args.seed,
            )  # fmt: skip
    if runs is not None:
        accuracy_part(data, runs, "recovery" in chosen, findings)
    report(args.quick, scale, findings, started)


def prepare(scale: UpdateScale, seed: int, labelled: bool) -> Prepared:
    """Train the model before the drift; split the drifted windows into training and
    validation data, labelled by a golden model when ``labelled`` (Ekya's ground-truth
    stand-in), else with their true labels (the labels do not change the timings)."""
    stream = DriftingStream(
        load_digits_images(16), DriftConfig(seed=seed, window_size=scale.window_size)
    )
    factory = functools.partial(make_edge_model, 10, 16, 8, seed)
    before = [stream.window(t) for t in (0, 1)]
    base = factory()
    train_epochs(
        base,
        np.concatenate([w.images for w in before]),
        np.concatenate([w.labels for w in before]),
        8,
        TrainConfig(),
        seed=seed,
    )
    drifted = [stream.window(t) for t in (4, 5)]
    x = np.concatenate([w.images for w in drifted])
    golden = None
    if labelled:
        xa, ya = stream.augmented_pool(scale.golden_pool, seed=seed)
        golden = train_golden(
            xa, ya, 10, 16, scale.golden_epochs, scale.golden_members, seed, device="cpu"
        )
        y_train = predict(golden, x)
    else:
        y_train = np.concatenate([w.labels for w in drifted])
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = len(x) // 5
    val = (x[order[:n_val]], y_train[order[:n_val]])
    train = (x[order[n_val:]], y_train[order[n_val:]])
    return Prepared(stream, factory, base, get_flat_weights(base), drifted, train, val, golden)


def speedup_part(scale: UpdateScale, data: Prepared, findings: Findings) -> None:
    """Measurement 1: Deep-Edge's plan against the fair one."""
    sp_data = (data.train[0][: scale.speed_samples], data.train[1][: scale.speed_samples])
    speed = measure_speedup(data.factory, sp_data, data.val, data.weights, scale.time_scale,
                            scale.speed_epochs)  # fmt: skip
    findings.results["speedup"] = speed["speedup"]
    findings.rows += speedup_rows(speed)


def ps_part(scale: UpdateScale, data: Prepared, quick: bool, findings: Findings) -> None:
    """Measurement 2: one worker through the PS against the plain loop.

    Speed only: more drifted windows (true labels) so that an epoch has ``ps_samples``
    samples and the per-epoch pull does not dominate a short epoch. ``quick`` measures the
    update's default only; the full run also the synchronous variant (window 0) and pushes
    as Ray actor calls, side by side in the same rounds.
    """
    ps_extra = max(0, -(-scale.ps_samples // scale.window_size) - len(data.drifted))
    ps_windows = [*data.drifted, *(data.stream.window(t) for t in range(6, 6 + ps_extra))]
    ps_x = np.concatenate([w.images for w in ps_windows])[: scale.ps_samples]
    ps_y = np.concatenate([w.labels for w in ps_windows])[: scale.ps_samples]
    defaults = UpdateConfig()
    default: PSVariant = (defaults.transport, defaults.push_window)
    variants: tuple[PSVariant, ...] = (default,)
    if not quick:
        others = ((defaults.transport, 0), (PushTransport.RAY_CALL, defaults.push_window))
        variants = tuple(dict.fromkeys((default, *others)))
    ps = measure_ps_overhead(scale, ps_x, ps_y, variants, scale.ps_rounds)
    findings.results["ps_throughput_ratio"] = ps[f"{variant_key(default)}_ratio"]
    findings.rows += ps_rows(ps, scale, variants)


def accuracy_part(
    data: Prepared,
    runs: list[tuple[int, UpdateResult, UpdateResult | None]],
    with_recovery: bool,
    findings: Findings,
) -> None:
    """Measurements 3 and 4, scored on held-out images (true labels, never trained on):
    the old regime is windows 0-1, the drifted regime windows 4-9 (full drift, one class
    mix), 1,800 images, so one image is 0.06 points."""
    assert data.golden is not None
    old_eval = eval_set([data.stream.window(t) for t in (0, 1)])
    new_eval = eval_set([*data.drifted, *(data.stream.window(t) for t in range(6, 10))])
    findings.rows += accuracy_rows(
        data.factory, data.base, data.golden, old_eval, new_eval, runs, with_recovery,
        findings.results,
    )  # fmt: skip


def report(quick: bool, scale: UpdateScale, findings: Findings, started: float) -> None:
    """The header, the table, the elapsed time and the RESULT line (canonical key order)."""
    print(
        f"# deepedge.bench.update{' --quick' if quick else ''} on "
        f"{machine_description()}; devices EMULATED (time scale x{scale.time_scale:g})"
    )
    print(table(["measurement", "value"], findings.rows))
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    keys = ("speedup", "ps_throughput_ratio", "recovered_frac", "fault_acc_delta")
    print(result_line({k: findings.results[k] for k in keys if k in findings.results}))


if __name__ == "__main__":
    main()
