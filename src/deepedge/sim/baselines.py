"""Choosing the uniform baseline's fixed configurations the way Ekya's evaluation does (Sec. 6.1).

On a hold-out trace (streams never used in the test), every retraining configuration is
summarised by its mean accuracy after retraining and its mean GPU-seconds over all streams and
windows. The Pareto front keeps the configurations no other configuration beats on both.
"Config 1" is the most accurate point of the front (high resource use); "Config 2" is the
front's point nearest the geometric middle of its cost range (low resource use). The uniform
scheduler then runs one of them for every stream and window with a fixed inference share.

:func:`holdout_best` is the strongest fixed policy a hold-out trace can justify: every
(configuration, inference share) replayed by the uniform scheduler on the hold-out trace at
the same GPUs per stream as the test, keeping the most accurate pair. It is chosen without
looking at the test trace, so it is a fair baseline, and it can only be stronger than the
two Pareto points when the front is flat (cheap configurations almost as accurate as dear
ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError
from deepedge.planning.window.uniform import UniformScheduler
from deepedge.sim.simulator import simulate
from deepedge.sim.trace import EkyaTrace

INFERENCE_SHARES = (0.3, 0.5, 0.7, 0.9)


@dataclass(frozen=True)
class ConfigSummary:
    name: str
    mean_accuracy: float
    mean_gpu_seconds: float


def summarize_configs(trace: EkyaTrace) -> list[ConfigSummary]:
    """Mean true accuracy after retraining and GPU-seconds per configuration name."""
    acc: dict[str, list[float]] = {}
    cost: dict[str, list[float]] = {}
    for window in trace.windows:
        for row in window.streams:
            for c in row.retraining:
                acc.setdefault(c.name, []).append(c.accuracy_after)
                cost.setdefault(c.name, []).append(c.gpu_seconds)
    return [ConfigSummary(n, sum(acc[n]) / len(acc[n]), sum(cost[n]) / len(cost[n])) for n in acc]


def pareto_front(summaries: list[ConfigSummary]) -> list[ConfigSummary]:
    """Configurations not dominated in (higher accuracy, lower cost), cheapest first."""
    front = [
        s
        for s in summaries
        if not any(
            o.mean_accuracy >= s.mean_accuracy
            and o.mean_gpu_seconds <= s.mean_gpu_seconds
            and (o.mean_accuracy > s.mean_accuracy or o.mean_gpu_seconds < s.mean_gpu_seconds)
            for o in summaries
        )
    ]
    return sorted(front, key=lambda s: s.mean_gpu_seconds)


def uniform_configs(holdout: EkyaTrace) -> tuple[str, str]:
    """(Config 1, Config 2): the high and the low resource point of the hold-out front."""
    front = pareto_front(summarize_configs(holdout))
    if not front:
        raise InvalidInputError("the hold-out trace has no retraining configurations")
    high = max(front, key=lambda s: s.mean_accuracy)
    lo_cost = max(front[0].mean_gpu_seconds, 1e-9)
    mid = math.sqrt(lo_cost * max(high.mean_gpu_seconds, lo_cost))
    low = min(front, key=lambda s: abs(math.log(max(s.mean_gpu_seconds, 1e-9) / mid)))
    return high.name, low.name


def holdout_best(holdout: EkyaTrace, gpus_per_stream: float) -> tuple[str, float]:
    """(config, inference share) with the best uniform accuracy on ``holdout``.

    Replayed on ``gpus_per_stream * len(holdout.streams)`` GPUs, so a test with ``G`` GPUs
    for ``n`` streams asks for ``G / n``. Ties go to the first in (name, share) order.
    """
    if gpus_per_stream <= 0:
        raise InvalidInputError(f"gpus_per_stream must be > 0, got {gpus_per_stream}")
    names = sorted({c.name for w in holdout.windows for r in w.streams for c in r.retraining})
    if not names:
        raise InvalidInputError("the hold-out trace has no retraining configurations")
    gpus = gpus_per_stream * len(holdout.streams)
    best: tuple[float, str, float] | None = None
    for name in names:
        for share in INFERENCE_SHARES:
            acc = simulate(holdout, UniformScheduler(name, share), gpus=gpus).mean_accuracy
            if best is None or acc > best[0]:
                best = (acc, name, share)
    assert best is not None
    return best[1], best[2]
