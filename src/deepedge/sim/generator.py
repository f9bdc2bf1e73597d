"""A documented generator of drifting multi-stream Ekya traces (stand-in for recorded profiles).

Everything is drawn from one seeded ``numpy`` generator, so a seed names a trace.

Streams. Stream ``v`` needs ``D_v ~ U(0.25, 0.5)`` GPUs to analyse every frame at full
resolution. Its inference configurations cross frame sampling ``r in {1, 1/2, 1/4, 1/8}``
with resolution scale ``s in {1, 0.75, 0.5}``: demand ``D_v * r * s^2`` and accuracy factor
``r^0.3 * (1 - 0.5 (1 - s))`` (sampling loses little on redundant video, low resolution more).

Drift. Each stream has a drift scale ``k_v ~ U(0.02, 0.15)`` (static cameras drift little,
dashboard cameras a lot); at window ``w`` its deployed model loses
``drift ~ k_v * Exp(1)`` accuracy points (capped at 0.3), never below ``floor_accuracy``.
The accuracy a full retraining on window ``w`` data could reach is ``a*_w ~ U(0.82, 0.95)``.

Retraining configurations (18): epochs ``E in {5, 15, 30}`` x data fraction
``f in {0.1, 0.3, 1.0}`` x layers retrained ``{last, all}``. Retraining from accuracy ``a``
reaches ``a + (a*_w - a) * q`` with quality ``q = (1 - e^{-E/8}) * (0.55 + 0.45 sqrt f) * L``
(``L = 0.8`` retraining only the last layers, 1 for all) and costs
``c = e_v * E * f * C`` GPU-seconds, ``e_v ~ U(8, 16)`` per full-data epoch, ``C = 0.35`` for
the last layers, 1 for all. The starting accuracy ``a`` is the one of a stream retrained to
``a*_{w-1}`` in the previous window, minus this window's drift: the trace cannot know the
schedule, so every retraining of window ``w`` starts from that reference. A stream that was
not retrained keeps losing ``drift`` per window, and then retraining it gains the most.

Estimates. ``estimated_accuracy_after`` adds ``N(0, sigma_acc)`` noise (the micro-profiler's
error, default 0.05) and ``estimated_gpu_seconds`` multiplies by ``1 + N(0, sigma_cost)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from deepedge.planning.window.documents import InferenceConfig, RetrainingHyperparameters
from deepedge.sim.trace import (
    EkyaTrace,
    TraceRetraining,
    TraceStream,
    TraceStreamWindow,
    TraceWindow,
)

EPOCHS = (5, 15, 30)
DATA_FRACTIONS = (0.1, 0.3, 1.0)
LAYERS = ("last", "all")


@dataclass(frozen=True)
class TraceSpec:
    """Knobs of :func:`generate_trace`."""

    streams: int = 10
    windows: int = 10
    window_s: float = 200.0
    gpus: float = 4.0
    delta_gpus: float = 0.1
    a_min: float = 0.25
    floor_accuracy: float = 0.45
    sigma_accuracy: float = 0.05
    sigma_cost: float = 0.05
    seed: int = 0


def inference_configs(full_rate_gpus: float) -> list[InferenceConfig]:
    out: list[InferenceConfig] = []
    for r in (1.0, 0.5, 0.25, 0.125):
        for s in (1.0, 0.75, 0.5):
            out.append(
                InferenceConfig(
                    name=f"r{round(r * 1000)}-s{round(s * 100)}",
                    accuracy_factor=r**0.3 * (1.0 - 0.5 * (1.0 - s)),
                    gpu_demand=full_rate_gpus * r * s * s,
                )
            )
    return out


def config_name(epochs: int, data_fraction: float, layers: str) -> str:
    return f"e{epochs}-f{round(data_fraction * 100)}-{layers}"


def _quality(epochs: int, data_fraction: float, layers: str) -> float:
    return (
        (1.0 - math.exp(-epochs / 8.0))
        * (0.55 + 0.45 * math.sqrt(data_fraction))
        * (1.0 if layers == "all" else 0.8)
    )


def generate_trace(spec: TraceSpec) -> EkyaTrace:
    """A trace of ``spec.streams`` drifting streams over ``spec.windows`` windows."""
    rng = np.random.default_rng(spec.seed)
    full_rate = rng.uniform(0.25, 0.5, spec.streams)
    drift_scale = rng.uniform(0.02, 0.15, spec.streams)
    epoch_s = rng.uniform(8.0, 16.0, spec.streams)
    initial = rng.uniform(0.7, 0.85, spec.streams)
    streams = [
        TraceStream(
            stream_id=f"cam{v:02d}",
            initial_accuracy=float(initial[v]),
            floor_accuracy=spec.floor_accuracy,
            inference_configs=inference_configs(float(full_rate[v])),
        )
        for v in range(spec.streams)
    ]
    reference = [float(a) for a in initial]
    windows: list[TraceWindow] = []
    for _ in range(spec.windows):
        rows: list[TraceStreamWindow] = []
        for v in range(spec.streams):
            drift = float(min(0.3, drift_scale[v] * rng.exponential(1.0)))
            start = max(spec.floor_accuracy, reference[v] - drift)
            target = float(rng.uniform(0.82, 0.95))
            reference[v] = target
            configs: list[TraceRetraining] = []
            for epochs in EPOCHS:
                for frac in DATA_FRACTIONS:
                    for layers in LAYERS:
                        acc = start + max(0.0, target - start) * _quality(epochs, frac, layers)
                        cost = epoch_s[v] * epochs * frac * (1.0 if layers == "all" else 0.35)
                        est_acc = acc + rng.normal(0.0, spec.sigma_accuracy)
                        est_cost = cost * (1.0 + rng.normal(0.0, spec.sigma_cost))
                        configs.append(
                            TraceRetraining(
                                name=config_name(epochs, frac, layers),
                                accuracy_after=round(acc, 6),
                                gpu_seconds=round(float(cost), 4),
                                estimated_accuracy_after=round(float(np.clip(est_acc, 0, 1)), 6),
                                estimated_gpu_seconds=round(float(max(0.0, est_cost)), 4),
                                hyperparameters=RetrainingHyperparameters(
                                    epochs=epochs,
                                    batch_size=32,
                                    last_layer_neurons=64,
                                    frozen_layers=3 if layers == "last" else 0,
                                    data_fraction=frac,
                                ),
                            )
                        )
            rows.append(TraceStreamWindow(stream_id=f"cam{v:02d}", drift=drift, retraining=configs))
        windows.append(TraceWindow(streams=rows))
    return EkyaTrace(
        window_s=spec.window_s,
        gpus=spec.gpus,
        delta_gpus=spec.delta_gpus,
        a_min=spec.a_min,
        streams=streams,
        windows=windows,
    )
