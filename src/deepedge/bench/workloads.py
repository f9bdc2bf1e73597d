"""Benchmark of the realistic workload: ``python -m deepedge.bench.workloads [--quick]``.

The workload: the ResNet-18-class network (:mod:`deepedge.learning.resnet`, 11.17M
parameters, 64x64 colour images) on the drifting photo stream
(:mod:`deepedge.learning.photo_stream`: crops of scikit-image's photographs, 8 classes,
dusk drift from window 3 on). The stale model is trained from scratch on windows 0-2
(before the drift); the update data are windows 4-5 (full drift, true labels: the stream's
own, no golden model), 20 % of them validating the update. Accuracies are scored on
held-out crops: windows 0-1 (old regime) and 4-7 (drifted regime).

Measurements, side by side in one run, on this machine (2-core CPU):

1. **PS throughput ratio** (``ps``): one worker through the parameter server (the
   update's real path: PS and worker actors, the gradient channel, push window 1, no
   pacing) against a plain torch loop (same model, data, batch, SGD with momentum, one
   thread, a Ray actor too), in interleaved rounds; fastest steady-state epoch of each
   side (:func:`~deepedge.bench.workloads_parts.measure_ps_ratio`). With the full model
   trainable (and, beside it, with fp16 gradients) and with the frozen backbone.
2. **Speedup** (``speedup``): the same data and epochs with the Deep-Edge plan
   (Algorithm 1 on noisy estimates) and with equal shards over all four workers, on the
   emulated testbed, planned and paced with the device catalog **of this workload**
   (:class:`~deepedge.perfmodel.catalog.ModelCost`: its training GFLOPs and trainable
   parameters); the measured median epoch times are compared; deadline violations of the
   Deep-Edge plan on the noise-free catalog. Run with the frozen backbone: with the whole
   model trainable, four workers' real steps on two cores take longer than the modelled
   ones at any time scale that fits a few minutes (the emulation would be host-bound).
3. **Recovery** (``recovery``): the stale model updated on the drifted data (Deep-Edge
   plan, four workers, host speed, dynamic stopping: the Optimus rule, confirmed by the
   measured curve, with a 3-epoch look-ahead and min gain 0.005 for the full model, 10
   epochs and 0.002 with twice the epoch budget, first fit after 10 epochs, for the
   frozen-convolution variants);
   ``recovered_frac = (acc_updated - acc_stale) / (acc_before - acc_stale)`` of the
   workload's edge variant: **frozen convolutions, trainable normalisation** (the head and
   every GroupNorm scale and shift, 13.7k values;
   ``make_resnet(frozen_backbone=True, train_norms=True)``).
   Beside it: the head alone on the frozen backbone (4.1k values: its features, fixed
   before the drift, cap it at about 0.90 recovered on some seeds, docs/DESIGN.md), and
   the full model with float32 and with fp16 gradients (the accuracy effect of fp16).
4. **Micro-profiler** (``microprofile``): Ekya's micro-profiler on the stale model and
   drifted window 4, against exhaustive retraining of every configuration (epochs x data
   fraction x frozen blocks, :func:`~deepedge.bench.workloads_parts.measure_microprofile`):
   median absolute error and cost fraction. The window has ``mp_window_size`` (512) training
   crops, not the update's 256: a stream of the same photos and drift with larger windows
   (20 % validates, the rest is the pool). At 256 crops the exhaustive retrainings are so
   short that the 30 SGD steps the profile needs (``ProfileSettings.min_steps``) cost 18 %
   of them; the digits benchmark profiles 1,500-image windows.
5. **Memory**: the peak resident memory of an update with four workers, PS + workers (each
   process's peak RSS, summed; the largest over the updates of parts 2 and 3).

``--quick`` runs every part at toy sizes (a width-8 ResNet-18 on 32x32 crops, float32
gradients only, two-epoch recoveries) for the test suite; its figures say nothing about the
targets.

Last line: ``RESULT ps_ratio_full=... ps_ratio_frozen=... speedup=... recovered_frac=...
microprofile_mae=... microprofile_cost_frac=... peak_mem_gib=...``.
"""

from __future__ import annotations

import argparse
import functools
import time
from dataclasses import dataclass

import numpy as np
import torch

from deepedge.bench.harness.microprofile import microprofile_grid
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.testbed import Data, measure_speedup
from deepedge.bench.workloads_parts import (
    RecoveryRun,
    measure_microprofile,
    measure_ps_ratio,
    measure_recovery,
)
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, parameter_count
from deepedge.learning.photo_stream import PhotoDriftConfig, PhotoStream
from deepedge.learning.resnet import forward_gflops, make_resnet
from deepedge.learning.stream import Window
from deepedge.learning.training import TrainConfig, accuracy, train_epochs
from deepedge.perfmodel.catalog import ModelCost
from deepedge.runtime.cluster.session import ray_session
from deepedge.runtime.training.gradient_channel import GradientEncoding
from deepedge.runtime.training.update_config import UpdateConfig


@dataclass(frozen=True)
class WorkloadScale(Scale):
    image_size: int
    width: int  # ResNet width (64: ResNet-18)
    window_size: int
    eval_size: int
    base_epochs: int  # training of the stale model before the drift
    ps_samples: int
    ps_batch: int
    ps_epochs: int
    ps_rounds: int
    speed_samples: int
    speed_epochs: int
    time_scale: float
    update_max_epochs: int
    mp_window_size: int  # training samples of the micro-profiled window (part 4)
    mp_epochs: tuple[int, ...]
    mp_fractions: tuple[float, ...]
    mp_frozen: tuple[int, ...]  # frozen blocks of ``features`` (5: all but the head)
    full_recovery: bool  # also update the full model (float32 and fp16)


SCALES = Sizes(
    full=WorkloadScale(image_size=64, width=64, window_size=256, eval_size=256, base_epochs=6,
                       ps_samples=512, ps_batch=64, ps_epochs=2, ps_rounds=2, speed_samples=512,
                       speed_epochs=3, time_scale=3.0, update_max_epochs=15, mp_window_size=512,
                       mp_epochs=(5, 10, 20), mp_fractions=(0.5, 1.0), mp_frozen=(4, 5),
                       full_recovery=True),
    quick=WorkloadScale(image_size=32, width=8, window_size=32, eval_size=32, base_epochs=1,
                        ps_samples=32, ps_batch=16, ps_epochs=1, ps_rounds=1, speed_samples=32,
                        speed_epochs=2, time_scale=0.5, update_max_epochs=1, mp_window_size=32,
                        mp_epochs=(2, 4), mp_fractions=(1.0,), mp_frozen=(5,),
                        full_recovery=False),
)  # fmt: skip

MEASUREMENTS = ("ps", "speedup", "recovery", "microprofile")
# The recovery variant whose fraction is the RESULT's recovered_frac (the first one run).
HEADLINE = "frozen convolutions, trainable norms"
KEYS = (
    "ps_ratio_full",
    "ps_ratio_frozen",
    "speedup",
    "recovered_frac",
    "microprofile_mae",
    "microprofile_cost_frac",
    "peak_mem_gib",
)


def _join(windows: list[Window], held_out: bool = False) -> Data:
    if held_out:
        return np.concatenate([w.eval_images for w in windows]), np.concatenate(
            [w.eval_labels for w in windows]
        )
    return np.concatenate([w.images for w in windows]), np.concatenate([w.labels for w in windows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes, for tests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument(
        "--address", default=None, help="Ray cluster to join (default: $RAY_ADDRESS, else local)"
    )
    parser.add_argument(
        "--measure",
        action="append",
        choices=MEASUREMENTS,
        help="run only these measurements (repeatable; default: all, side by side)",
    )
    args = parser.parse_args(argv)
    chosen = set(args.measure or MEASUREMENTS)
    scale = SCALES.pick(args.quick)
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # as the workers: one thread each, robust on a busy host
    stream = PhotoStream(
        PhotoDriftConfig(seed=args.seed, window_size=scale.window_size, eval_size=scale.eval_size),
        scale.image_size,
    )
    n_classes = stream.n_classes
    full = functools.partial(make_resnet, n_classes, scale.image_size, scale.width, args.seed)
    frozen = functools.partial(
        make_resnet, n_classes, scale.image_size, scale.width, args.seed, True
    )
    norms = functools.partial(
        make_resnet, n_classes, scale.image_size, scale.width, args.seed, True, True
    )
    model = full()
    params, head = parameter_count(model), sum(p.numel() for p in model.head.parameters())
    gflops = forward_gflops(model)
    rows: list[list[object]] = [
        [
            "workload",
            f"ResNet-18-class (width {scale.width}), {scale.image_size}x{scale.image_size} RGB, "
            f"{n_classes} photo classes",
        ],
        ["parameters / trainable with the frozen backbone", f"{params} / {head}"],
        ["forward GFLOPs per image", gflops],
    ]
    results: dict[str, float] = {}
    peaks_mb: list[float] = []

    before = [stream.window(t) for t in (0, 1, 2)]
    drifted = [stream.window(t) for t in (4, 5)]
    x, y = _join(drifted)
    order = np.random.default_rng(args.seed).permutation(len(y))
    n_val = len(y) // 5
    val = (x[order[:n_val]], y[order[:n_val]])
    train = (x[order[n_val:]], y[order[n_val:]])
    needs_base = chosen & {"speedup", "recovery", "microprofile"}
    base = full()
    if needs_base:
        t0 = time.perf_counter()
        train_epochs(base, *_join(before), scale.base_epochs, TrainConfig(), seed=args.seed)
        rows.append(
            [
                f"stale model: trained {scale.base_epochs} epochs before the drift (s)",
                time.perf_counter() - t0,
            ]
        )
    weights = get_flat_weights(base)

    with ray_session(args.cpus, args.address):
        if "ps" in chosen:
            ps_data = (
                np.concatenate([x, *(w.images for w in before)])[: scale.ps_samples],
                np.concatenate([y, *(w.labels for w in before)])[: scale.ps_samples],
            )
            encodings: tuple[GradientEncoding, ...] = (
                GradientEncoding.FLOAT32,
                GradientEncoding.FLOAT16,
            )
            if args.quick:  # fp16 is covered by the unit tests; the quick run stays short
                encodings = (GradientEncoding.FLOAT32,)
            ps_full = measure_ps_ratio(
                full, ps_data, scale.ps_batch, scale.ps_epochs, scale.ps_rounds, encodings
            )
            ps_frozen = measure_ps_ratio(
                frozen, ps_data, scale.ps_batch, scale.ps_epochs, scale.ps_rounds
            )
            results["ps_ratio_full"] = ps_full["float32_ratio"]
            results["ps_ratio_frozen"] = ps_frozen["float32_ratio"]
            rows += _ps_rows(ps_full, ps_frozen, scale)
        if "speedup" in chosen:
            cost = ModelCost.of(gflops, params, head)
            sp_data = (train[0][: scale.speed_samples], train[1][: scale.speed_samples])
            speed = measure_speedup(
                frozen, sp_data, val, weights, scale.time_scale, scale.speed_epochs, cost
            )
            results["speedup"] = speed["speedup"]
            peaks_mb += [speed["deep-edge_peak_mem_mb"], speed["fair_peak_mem_mb"]]
            rows += _speedup_rows(speed, scale, cost)
        if "recovery" in chosen:
            rule = StoppingRule(
                max_epochs=scale.update_max_epochs, horizon_epochs=3, min_gain=0.005
            )
            # The frozen convolutions (head, and the norms): epochs are cheap and the
            # asynchronous validation curve is noisy (+-0.04 from epoch to epoch) but still
            # rising after 15 epochs, so a longer look-ahead and budget (chosen on the
            # update's validation split for the head, not on the images the recovered
            # fraction is scored on; docs/BENCHMARKS.md).
            head_rule = StoppingRule(
                min_epochs=min(10, 2 * scale.update_max_epochs),
                max_epochs=2 * scale.update_max_epochs,
                horizon_epochs=10,
                min_gain=0.002,
            )
            # The head is updated with the SGD that trained the stale model (TrainConfig:
            # lr 0.05, momentum 0.9); the runtime compensates its momentum for the
            # asynchrony of the plan's workers (parameter_server.asynchronous_sgd).
            sgd = TrainConfig()
            head_config = UpdateConfig(stopping=head_rule, lr=sgd.lr, momentum=sgd.momentum)
            variants = [
                (HEADLINE, norms, head_config),
                ("frozen backbone", frozen, head_config),
            ]
            if scale.full_recovery:
                variants += [
                    ("full model", full, UpdateConfig(stopping=rule)),
                    (
                        "full model, fp16 gradients",
                        full,
                        UpdateConfig(stopping=rule, gradient_encoding=GradientEncoding.FLOAT16),
                    ),
                ]
            new_eval = _join([*drifted, *(stream.window(t) for t in (6, 7))], held_out=True)
            old_eval = _join(before[:2], held_out=True)
            runs = measure_recovery(variants, train, val, weights, new_eval, args.seed)
            peaks_mb += [r.peak_mem_mb for r in runs if r.workers == 4]
            rows += _recovery_rows(base, old_eval, new_eval, runs, results)
    if "microprofile" in chosen:
        # A camera window holds more labelled images than the update's 256-image windows
        # (the digits benchmark profiles 1,500-image windows): a separate stream of the same
        # photos and drift, ``mp_window_size`` training crops per window (docs/BENCHMARKS.md).
        tested = 4  # a drifted window
        window = PhotoStream(
            PhotoDriftConfig(
                seed=args.seed, window_size=scale.mp_window_size, eval_size=scale.eval_size
            ),
            scale.image_size,
        ).window(tested)
        configs = microprofile_grid(scale.mp_epochs, scale.mp_fractions, scale.mp_frozen, n_classes)
        mp = measure_microprofile(
            base,
            window.images,
            window.labels,
            (window.eval_images, window.eval_labels),
            configs,
            args.seed,
            window=tested,
        )
        results["microprofile_mae"] = mp.mae
        results["microprofile_cost_frac"] = mp.cost_frac
        rows += [
            [
                f"micro-profile: {p.config}, predicted / actual",
                f"{p.predicted:.3f} / {p.actual:.3f}",
            ]
            for p in mp.pairs
        ]
        rows += [
            ["micro-profiler median |error|", mp.mae],
            ["micro-profiling s / exhaustive s", f"{mp.profile_s:.1f} / {mp.exhaustive_s:.1f}"],
            ["micro-profiler cost fraction", mp.cost_frac],
        ]
    if peaks_mb:
        results["peak_mem_gib"] = max(peaks_mb) / 1024
        rows.append(
            [
                "peak resident memory of a 4-worker update, PS + workers (GiB)",
                results["peak_mem_gib"],
            ]
        )
    print(
        f"# deepedge.bench.workloads{' --quick' if args.quick else ''} on "
        f"{machine_description()}; devices EMULATED (time scale x{scale.time_scale:g})"
    )
    print(table(["measurement", "value"], rows))
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    print(result_line({k: results[k] for k in KEYS if k in results}))


def _ps_rows(
    full: dict[str, float], frozen: dict[str, float], scale: WorkloadScale
) -> list[list[object]]:
    rows: list[list[object]] = []
    for name, ps, encodings in (
        ("full model", full, ("float32", "float16") if "float16_ratio" in full else ("float32",)),
        ("frozen backbone", frozen, ("float32",)),
    ):
        rows.append(
            [
                f"{name}: plain torch loop, samples/s (batch {scale.ps_batch})",
                ps["plain_samples_per_s"],
            ]
        )
        for enc in encodings:
            rows += [
                [f"{name}: through PS, {enc} gradients, samples/s", ps[f"{enc}_samples_per_s"]],
                [
                    f"{name}: through PS, {enc}: ms per step / on the PS (median)",
                    f"{ps[f'{enc}_step_ms']:.1f} / {ps[f'{enc}_on_ps_ms']:.1f}",
                ],
                [f"{name}: PS throughput ratio, {enc} gradients", ps[f"{enc}_ratio"]],
            ]
    return rows


def _speedup_rows(
    speed: dict[str, float], scale: WorkloadScale, cost: ModelCost
) -> list[list[object]]:
    return [
        [
            "speedup workload (catalog: training GFLOPs per sample / trainable params)",
            f"frozen backbone ({cost.train_gflops_per_sample:.3f} / {cost.trainable_params})",
        ],
        ["epoch time, Deep-Edge plan (s, measured)", speed["deep-edge_epoch_s"]],
        ["epoch time, equal shards (s, measured)", speed["fair_epoch_s"]],
        ["speedup (measured)", speed["speedup"]],
        [f"speedup (catalog ground truth x {scale.time_scale:g})", speed["model_speedup"]],
        [
            "workers Deep-Edge / equal shards",
            f"{speed['deep-edge_workers']:.0f} / {speed['fair_workers']:.0f}",
        ],
        [
            "deadline violations Deep-Edge / equal shards (ground truth)",
            f"{speed['deep-edge_violations']:.0f} / {speed['fair_violations']:.0f}",
        ],
        [
            "host-bound steps Deep-Edge / equal shards",
            f"{speed['deep-edge_overruns']:.0f} of {speed['deep-edge_steps']:.0f} / "
            f"{speed['fair_overruns']:.0f} of {speed['fair_steps']:.0f}",
        ],
    ]


def _recovery_rows(
    base: torch.nn.Module,
    old_eval: Data,
    new_eval: Data,
    runs: list[RecoveryRun],
    results: dict[str, float],
) -> list[list[object]]:
    acc_before = accuracy(base, *old_eval)
    acc_stale = accuracy(base, *new_eval)
    rows: list[list[object]] = [
        [f"accuracy before the drift (old regime, {len(old_eval[1])} images)", acc_before],
        [f"accuracy of the stale model (drifted, {len(new_eval[1])} images)", acc_stale],
    ]
    for run in runs:
        frac = (run.accuracy - acc_stale) / max(1e-9, acc_before - acc_stale)
        rows += [
            [
                f"{run.name}: accuracy after the update ({run.epochs} epochs, {run.stop}, "
                f"{run.workers} workers, {run.wall_s:.0f} s)",
                run.accuracy,
            ],
            [f"{run.name}: recovered fraction", frac],
            [f"{run.name}: peak memory PS + workers (MiB; sum of peak RSS)", run.peak_mem_mb],
            [
                f"{run.name}: peak RSS per process (MiB)",
                ", ".join(f"{name} {mb:.0f}" for name, mb in run.peaks_mb),
            ],
            [f"{run.name}: PSS of PS + workers at the end (MiB)", run.pss_mb],
            [
                f"{run.name}: peak of the summed PSS of PS + workers, sampled every 1 s (MiB)",
                run.pss_peak_mb,
            ],
        ]
    results["recovered_frac"] = (runs[0].accuracy - acc_stale) / max(1e-9, acc_before - acc_stale)
    rows.append(["recovered_frac (RESULT) is the recovered fraction of", runs[0].name])
    return rows


if __name__ == "__main__":
    main()
