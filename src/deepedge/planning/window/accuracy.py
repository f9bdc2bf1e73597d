"""EstimateAccuracy: a stream's inference accuracy averaged over a retraining window.

For a stream with deployed-model accuracy ``a0``, inference allocation ``I`` and retraining
allocation ``R`` (GPUs), retraining configuration ``gamma`` (accuracy ``a_g`` after
retraining, cost ``c_g`` GPU-seconds at 100% of one GPU, data scale ``s``) and window ``T``::

    d      = c_g * s / R                       retraining duration; needs d <= T
    a_dur  = a0  * f(lambda(I,     a0))        while retraining (old model)
    a_aft  = a_g * f(lambda(I + R, a_g))       after: the retraining share returns to inference
    A_T    = (d * a_dur + (T - d) * a_aft) / T

and without retraining ``A_T = a0 * f(lambda(I, a0))``. ``lambda(X, a)`` is the most accurate
inference configuration whose ``gpu_demand <= X`` and, when the floor is enforced, whose
accuracy ``a * f >= a_min`` (Algorithm 2, lines 3-4). A configuration that cannot finish in
``T`` or whose post-retraining accuracy would break ``a_min`` is never chosen.

When no inference configuration meets ``a_min`` within ``I`` the stream is short of
``need(a0) - I`` GPUs; schedulers treat a smaller total shortfall as strictly better, so
the hill climb of the thief walks towards feasibility before it trades accuracy.

Horizon-aware objective (an option beside the paper's; :class:`Horizon`). ``A_T`` counts a
retrained model only inside the current window, so a retraining whose benefit lands in later
windows looks unprofitable. With a horizon of ``H`` windows of length ``P`` (``period_s``)
and the drift ``delta`` the stream has shown per window, the model the window ends with,
``a_end = a_g`` if a retraining finishes else ``a0``, is credited in each next window ``h``
with ``f_ref * clip(a_end - h delta, 0, 1)``, weighted ``w_h = rho^(h-1)`` (``rho`` the
discount: later windows may retrain anyway)::

    V = (T A_T + P sum_h w_h f_ref clip(a_end - h delta)) / (T + P sum_h w_h)

``f_ref`` is the accuracy factor of the best inference configuration within the stream's
equal share ``G / n``: the inference the stream can expect in later windows, the same for
every choice of this window, so the horizon credits the model, not this window's
allocation. With ``H = 0`` (the default) ``V = A_T``: the paper's objective.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deepedge.planning.window.documents import (
    InferenceConfig,
    RetrainingConfig,
    StreamDecision,
    StreamWindow,
)

_EPS = 1e-9


@dataclass(frozen=True)
class StreamChoice:
    """PickConfigs' answer for one stream at one allocation."""

    inference_gpus: float
    retraining_gpus: float
    inference: InferenceConfig | None
    retraining: RetrainingConfig | None
    retraining_duration_s: float | None
    accuracy_during: float
    accuracy_after: float
    window_accuracy: float
    shortfall_gpus: float  # > 0: no inference config meets a_min within inference_gpus
    horizon_value: float | None = None  # V of the horizon objective, when one is used

    @property
    def value(self) -> float:
        """What the scheduler maximises: ``V`` under a horizon, else ``A_T``."""
        return self.window_accuracy if self.horizon_value is None else self.horizon_value

    def to_decision(self, stream_id: str) -> StreamDecision:
        return StreamDecision(
            stream_id=stream_id,
            inference_gpus=self.inference_gpus,
            retraining_gpus=self.retraining_gpus,
            inference_config=None if self.inference is None else self.inference.name,
            retraining_config=None if self.retraining is None else self.retraining.name,
            retraining_duration_s=self.retraining_duration_s,
            accuracy_during_retraining=self.accuracy_during,
            accuracy_after_retraining=self.accuracy_after,
            window_accuracy=self.window_accuracy,
        )


def pick_inference_config(
    configs: list[InferenceConfig],
    model_accuracy: float,
    alloc_gpus: float,
    a_min: float | None,
) -> InferenceConfig | None:
    """Most accurate config that keeps up within ``alloc_gpus`` (and meets ``a_min``)."""
    best: InferenceConfig | None = None
    for c in configs:
        if c.gpu_demand > alloc_gpus + _EPS:
            continue
        if a_min is not None and model_accuracy * c.accuracy_factor < a_min - _EPS:
            continue
        if best is None or c.accuracy_factor > best.accuracy_factor:
            best = c
    return best


def floor_demand_gpus(configs: list[InferenceConfig], model_accuracy: float, a_min: float) -> float:
    """Least GPUs with which some config meets ``a_min`` (inf when none can)."""
    demands = [c.gpu_demand for c in configs if model_accuracy * c.accuracy_factor >= a_min - _EPS]
    return min(demands) if demands else float("inf")


def retraining_duration_s(
    config: RetrainingConfig, retraining_gpus: float, data_scale: float
) -> float:
    """``d = c_g * s / R``; inf when the job gets nothing and has work to do."""
    work = config.gpu_seconds * data_scale
    if work <= 0.0:
        return 0.0
    if retraining_gpus <= _EPS:
        return float("inf")
    return work / retraining_gpus


def estimate_accuracy(
    stream: StreamWindow,
    retraining: RetrainingConfig | None,
    inference_gpus: float,
    retraining_gpus: float,
    window_s: float,
    a_min: float | None,
) -> StreamChoice | None:
    """EstimateAccuracy for one (retraining config, allocation); None if not allowed.

    ``a_min=None`` drops the floor (the uniform baseline ignores it) and lets a retraining
    that cannot finish in ``T`` run all window long, as a fixed schedule would.
    """
    a0 = stream.current_accuracy
    during = pick_inference_config(stream.inference_configs, a0, inference_gpus, a_min)
    shortfall = 0.0
    if during is None and a_min is not None:
        need = floor_demand_gpus(stream.inference_configs, a0, a_min)
        shortfall = max(need - inference_gpus, _EPS)
    acc_during = 0.0 if during is None else a0 * during.accuracy_factor
    if retraining is None:
        return StreamChoice(
            inference_gpus,
            retraining_gpus,
            during,
            None,
            None,
            acc_during,
            acc_during,
            acc_during,
            shortfall,
        )
    duration = retraining_duration_s(retraining, retraining_gpus, stream.data_scale)
    if duration > window_s * (1.0 + _EPS):  # relative: T may be any positive length
        if a_min is not None:
            return None
        return StreamChoice(
            inference_gpus,
            retraining_gpus,
            during,
            retraining,
            duration,
            acc_during,
            acc_during,
            acc_during,
            shortfall,
        )
    a_g = retraining.accuracy_after
    after = pick_inference_config(
        stream.inference_configs, a_g, inference_gpus + retraining_gpus, a_min
    )
    if after is None and a_min is not None:
        return None
    acc_after = 0.0 if after is None else a_g * after.accuracy_factor
    during_frac = min(1.0, duration / window_s)
    window_acc = during_frac * acc_during + (1.0 - during_frac) * acc_after
    return StreamChoice(
        inference_gpus,
        retraining_gpus,
        during,
        retraining,
        duration,
        acc_during,
        acc_after,
        window_acc,
        shortfall,
    )


@dataclass(frozen=True)
class Horizon:
    """The horizon objective's parameters: ``windows`` = H >= 1, ``discount`` = rho."""

    windows: int
    discount: float = 1.0

    def __post_init__(self) -> None:
        if self.windows < 1:
            raise ValueError(f"horizon windows {self.windows} < 1")
        if not 0.0 < self.discount <= 1.0:
            raise ValueError(f"horizon discount {self.discount} not in (0, 1]")


@dataclass(frozen=True)
class HorizonContext:
    """What the horizon objective needs beside a choice: ``H``, ``rho``, ``P`` and ``f_ref``."""

    horizon: Horizon
    period_s: float
    reference_factor: float

    def value(self, stream: StreamWindow, choice: StreamChoice, window_s: float) -> float:
        """``V`` of the module docstring."""
        a_end = stream.current_accuracy
        if choice.retraining is not None and (choice.retraining_duration_s or 0.0) <= window_s:
            a_end = choice.retraining.accuracy_after
        credit = weight = 0.0
        for h in range(1, self.horizon.windows + 1):
            w = self.horizon.discount ** (h - 1)
            acc = min(1.0, max(0.0, a_end - h * stream.drift_per_window))
            credit += w * self.reference_factor * acc
            weight += w
        total = window_s * choice.window_accuracy + self.period_s * credit
        return total / (window_s + self.period_s * weight)


def reference_factor(stream: StreamWindow, share_gpus: float) -> float:
    """``f_ref``: the best accuracy factor that keeps up within ``share_gpus`` (0 if none)."""
    fits = [
        c.accuracy_factor for c in stream.inference_configs if c.gpu_demand <= share_gpus + _EPS
    ]
    return max(fits, default=0.0)


def best_stream_choice(
    stream: StreamWindow,
    inference_gpus: float,
    retraining_gpus: float,
    window_s: float,
    a_min: float,
    horizon: HorizonContext | None = None,
) -> StreamChoice:
    """PickConfigs for one stream (Algorithm 2, lines 3-13): the best window accuracy (or,
    with ``horizon``, the best ``V``), or no retraining."""

    def scored(c: StreamChoice) -> StreamChoice:
        if horizon is None:
            return c
        return replace(c, horizon_value=horizon.value(stream, c, window_s))

    found = estimate_accuracy(stream, None, inference_gpus, retraining_gpus, window_s, a_min)
    assert found is not None  # no retraining is always allowed
    best = scored(found)
    if best.shortfall_gpus > 0.0:
        return best
    for config in stream.retraining_configs:
        choice = estimate_accuracy(stream, config, inference_gpus, retraining_gpus, window_s, a_min)
        if choice is None:
            continue
        choice = scored(choice)
        if choice.value > best.value + 1e-12:
            best = choice
    return best
