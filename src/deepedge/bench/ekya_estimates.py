"""What the horizon thief's gain on the recorded trace is bounded by:
``python -m deepedge.bench.ekya_estimates [--quick]``.

The Ekya target asks the horizon thief (``bench.ekya``'s ``gain_rel_horizon``) for 15 % at 1
GPU and 25 % at 2 against the uniform baseline chosen on the hold-out streams. Told the true
outcomes it gets there; on the micro-profiler's estimates it does not. This benchmark
measures why, in four parts:

1. **Outcome spread** (real torch runs). The same retraining configuration repeated
   ``repeats`` times on the same window from the same deployed model, each with its own pool
   split, validation draw and seeds (:func:`deepedge.sim.recorded.profiling_data`, as the
   recorder splits): the standard deviation of the measured accuracy (what the trace's
   ``accuracy_after`` is one draw of) and of the micro-profiler's estimate, and the estimate's
   bias (mean estimate - mean outcome). The deployed model is each stream's initial model
   (the recorder's chains need the earlier windows' runs).
2. **Synthetic estimates.** The horizon thief on the committed trace with estimates
   ``accuracy_after + N(0, sigma)`` (independent per row, clipped to [0, 1]; the estimated
   seconds stay the micro-profiler's), ``draws`` draws per sigma. ``sigma`` = part 1's outcome
   spread is an estimator that knows each configuration's expected outcome and nothing of the
   draw the trace recorded; no micro-profiler can do better without seeing that draw.
   Beside the horizon chosen on the hold-out streams (the one ``bench.ekya`` reports), the
   same rows with ``H = 1``.
3. **Error structure.** The trace's own errors ``e = estimate - accuracy_after`` split per
   stream and window into the common part (their mean over the configurations) and the
   configuration-specific rest: the thief on ``truth + common`` and on ``truth + rest``.
4. **Profiling cost** against the budget: the recorded CPU seconds of profiling all
   configurations of one stream in one window (median), per stream GPU-seconds of a window at
   the stressed GPU counts. The simulator charges profiling to no scheduler.

Ends with ``RESULT outcome_sd=... estimate_sd=... estimate_bias_abs=... gain1_at_outcome_sd=...
gain2_at_outcome_sd=... gain1_common_only=... gain2_common_only=... gain1_specific_only=...
gain2_specific_only=... profiling_per_budget_1gpu=...`` (gains relative to the uniform
baseline at 1 and 2 GPUs, with the hold-out's horizon).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from deepedge.bench.ekya_sweep import (
    STRESSED_GPUS,
    add_trace_argument,
    holdout_horizon,
    sweep_traces,
    uniform_baseline,
)
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.learning.microprofiler import (
    ProfileSettings,
    micro_profile,
    retrain,
    subset_indices,
)
from deepedge.learning.stream import load_digits_images
from deepedge.learning.training import accuracy
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.sim.recorded import (
    RecordSpec,
    default_streams,
    initial_model,
    profiling_data,
    retraining_configs,
)
from deepedge.sim.simulator import simulate
from deepedge.sim.trace import EkyaTrace, TraceRetraining, TraceStreamWindow

SPREAD_STREAMS = ("cam00", "cam01", "cam02", "cam07")  # 320, 640, 160, 160 pool images
SPREAD_WINDOWS = (1, 3)
SPREAD_CONFIGS = (
    "e1-f30-z1", "e1-f100-z1", "e3-f100-all", "e3-f30-head32", "e8-f30-z1", "e8-f100-all",
)  # fmt: skip
SIGMAS = (0.0, 0.02, 0.04, 0.06, 0.09)


@dataclass(frozen=True)
class Spread:
    """Part 1, one (stream, window, configuration): outcomes and estimates of the repeats."""

    stream_id: str
    window: int
    config: str
    outcomes: tuple[float, ...]
    estimates: tuple[float, ...]

    @property
    def outcome_sd(self) -> float:
        return statistics.stdev(self.outcomes)

    @property
    def estimate_sd(self) -> float:
        return statistics.stdev(self.estimates)

    @property
    def bias(self) -> float:
        return statistics.mean(self.estimates) - statistics.mean(self.outcomes)


def outcome_spread(
    streams: Sequence[str],
    windows: Sequence[int],
    configs: Sequence[str],
    repeats: int,
    samples_scale: float = 1.0,
) -> list[Spread]:
    """Part 1: each configuration retrained and micro-profiled ``repeats`` times per window
    (window sizes as the recorder's at ``samples_scale``)."""
    if repeats < 2:
        raise ValueError("repeats must be >= 2 to measure a spread")
    source = load_digits_images()
    record = RecordSpec(samples_scale=samples_scale)
    by_name = {c.name: c for c in retraining_configs()}
    specs = {s.stream_id: s for s in default_streams()}
    out: list[Spread] = []
    for sid in streams:
        stream, model, seed = initial_model(specs[sid], record, source)
        for w in windows:
            window = stream.window(w + 1)
            for name in configs:
                cfg = by_name[name]
                hp = cfg.hyperparameters
                outcomes, estimates = [], []
                for k in range(repeats):
                    rng = np.random.default_rng([seed, w, 17, 1000 + k])
                    pool, val = profiling_data(stream, window, rng, k)
                    n = len(pool[1])
                    take = subset_indices(n, hp.data_fraction, rng)
                    trained, _, _ = retrain(
                        model, pool[0][take], pool[1][take], hp, hp.epochs, seed + k
                    )
                    outcomes.append(accuracy(trained, window.eval_images, window.eval_labels))
                    settings = ProfileSettings(seed=seed + w + 31 * k)
                    estimates.append(
                        micro_profile(model, pool, val, [cfg], settings)[0].predicted_accuracy
                    )
                out.append(Spread(sid, w, name, tuple(outcomes), tuple(estimates)))
    return out


EstimateRule = Callable[[int, TraceStreamWindow, TraceRetraining], float]


def with_estimates(trace: EkyaTrace, rule: EstimateRule) -> EkyaTrace:
    """``trace`` whose accuracy estimates are ``rule(window index, row, retraining)``, clipped
    to [0, 1]; everything else (the estimated seconds included) unchanged."""

    def row(w: int, r: TraceStreamWindow) -> TraceStreamWindow:
        retraining = [
            c.model_copy(
                update={"estimated_accuracy_after": float(np.clip(rule(w, r, c), 0.0, 1.0))}
            )
            for c in r.retraining
        ]
        return r.model_copy(update={"retraining": retraining})

    windows = [
        window.model_copy(update={"streams": [row(w, r) for r in window.streams]})
        for w, window in enumerate(trace.windows)
    ]
    return trace.model_copy(update={"windows": windows})


def noisy_truth(trace: EkyaTrace, sigma: float, seed: int) -> EkyaTrace:
    """Part 2: estimates = true outcome + independent N(0, ``sigma``) noise."""
    rng = np.random.default_rng(seed)
    return with_estimates(trace, lambda _w, _r, c: c.accuracy_after + rng.normal(0.0, sigma))


def common_errors(trace: EkyaTrace) -> dict[tuple[int, str], float]:
    """Part 3: per (window index, stream) the mean estimate error over its configurations."""
    return {
        (w, r.stream_id): statistics.mean(c.est_accuracy - c.accuracy_after for c in r.retraining)
        for w, window in enumerate(trace.windows)
        for r in window.streams
        if r.retraining
    }


def common_only(trace: EkyaTrace) -> EkyaTrace:
    """The truth plus each stream-window's common error: configurations ranked exactly."""
    common = common_errors(trace)
    return with_estimates(trace, lambda w, r, c: c.accuracy_after + common[(w, r.stream_id)])


def specific_only(trace: EkyaTrace) -> EkyaTrace:
    """The estimates less each stream-window's common error: only the ranking errors left."""
    common = common_errors(trace)
    return with_estimates(trace, lambda w, r, c: c.est_accuracy - common[(w, r.stream_id)])


def baseline(test: EkyaTrace, holdout: EkyaTrace) -> dict[int, float]:
    """``bench.ekya``'s uniform baseline's mean accuracy per stressed GPU count (a fixed
    configuration: the estimates do not change it)."""
    return {g: uniform_baseline(test, holdout, g)[0].mean_accuracy for g in STRESSED_GPUS}


def gains(trace: EkyaTrace, base: dict[int, float], horizon: Horizon) -> dict[int, float]:
    """The horizon thief's relative gain over ``base`` per stressed GPU count."""
    return {
        g: simulate(trace, ThiefScheduler(horizon=horizon), gpus=g).mean_accuracy / base[g] - 1.0
        for g in STRESSED_GPUS
    }


MEASURED, EXACT = "micro-profiler (the trace)", "true outcomes and seconds"
SIGMA_LABEL = "truth + N(0, {})"
COMMON_ONLY, SPECIFIC_ONLY = "truth + common error", "estimates - common error"


def estimate_gains(
    test: EkyaTrace,
    base: dict[int, float],
    horizon: Horizon,
    outcome_sd: float,
    draws: int,
    sigmas: Sequence[float] = SIGMAS,
) -> dict[str, dict[int, float]]:
    """Parts 2-3: the horizon thief's gains over ``base`` (:func:`baseline`) per stressed GPU
    count with each kind of estimates, by label (synthetic ones: ``sigmas`` and
    ``outcome_sd``, the mean over ``draws`` draws)."""
    out = {
        MEASURED: gains(test, base, horizon),
        EXACT: gains(test.without_estimates(), base, horizon),
    }
    for sigma in sorted({*sigmas, round(outcome_sd, 4)}):
        per = [gains(noisy_truth(test, sigma, d), base, horizon) for d in range(draws)]
        out[SIGMA_LABEL.format(sigma)] = {
            g: statistics.mean(p[g] for p in per) for g in STRESSED_GPUS
        }
    out[COMMON_ONLY] = gains(common_only(test), base, horizon)
    out[SPECIFIC_ONLY] = gains(specific_only(test), base, horizon)
    return out


def _row_labels(rows: dict[str, dict[int, float]], draws: int) -> list[tuple[str, object]]:
    return [(label, draws if label.startswith("truth + N") else "-") for label in rows]


def profiling_per_budget(trace: EkyaTrace, gpus: float) -> float:
    """Median profiling seconds of one stream-window over a stream's GPU-seconds per window."""
    profiled = [r.profiling_s for w in trace.windows for r in w.streams if r.profiling_s]
    if not profiled:
        return float("nan")
    return statistics.median(profiled) / (trace.window_s * gpus / len(trace.streams))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    add_trace_argument(parser, "parts 2-4 on ")
    parser.add_argument(
        "--samples-scale",
        type=float,
        default=1.0,
        help="part 1's window sizes, as ekya_record's --samples-scale (default 1)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    print(f"machine: {machine_description()}")
    torch.set_num_threads(1)
    spread = outcome_spread(
        SPREAD_STREAMS[2:3] if quick else SPREAD_STREAMS,
        SPREAD_WINDOWS[:1] if quick else SPREAD_WINDOWS,
        SPREAD_CONFIGS[:2] if quick else SPREAD_CONFIGS,
        2 if quick else 5,
        args.samples_scale,
    )
    print("\n1. the same retraining repeated (own split, validation draw and seeds)")
    print(
        table(
            ["stream", "window", "config", "outcome mean", "outcome sd", "estimate mean",
             "estimate sd", "bias"],
            [[s.stream_id, s.window, s.config, round(statistics.mean(s.outcomes), 4),
              round(s.outcome_sd, 4), round(statistics.mean(s.estimates), 4),
              round(s.estimate_sd, 4), round(s.bias, 4)] for s in spread],
        )
    )  # fmt: skip
    outcome_sd = statistics.mean(s.outcome_sd for s in spread)
    estimate_sd = statistics.mean(s.estimate_sd for s in spread)
    bias_abs = statistics.mean(abs(s.bias) for s in spread)
    print(f"mean outcome sd {outcome_sd:.4f}, estimate sd {estimate_sd:.4f}, |bias| {bias_abs:.4f}")

    test, holdout = sweep_traces(quick, args.trace)
    horizon = holdout_horizon(holdout, len(test.streams))
    print(f"\nhorizon chosen on the hold-out streams: H = {horizon.windows}, "
          f"discount {horizon.discount}")  # fmt: skip
    draws, sigmas = (1, SIGMAS[::2]) if quick else (4, SIGMAS)
    base = baseline(test, holdout)
    chosen = estimate_gains(test, base, horizon, outcome_sd, draws, sigmas)
    tables = [(f"H={horizon.windows} (hold-out)", chosen)]
    if horizon != Horizon(1) and not quick:
        tables.append(("H=1", estimate_gains(test, base, Horizon(1), outcome_sd, draws)))
    print("\n2-3. the horizon thief's gain over the uniform baseline with other estimates")
    print(
        table(
            ["estimates", "draws",
             *(f"{g} GPU, {label}" for label, _ in tables for g in STRESSED_GPUS)],
            [[label, draws_, *(round(t[label][g], 4) for _, t in tables for g in STRESSED_GPUS)]
             for label, draws_ in _row_labels(chosen, draws)],
        )
    )  # fmt: skip
    at_sd = chosen[SIGMA_LABEL.format(round(outcome_sd, 4))]
    common, specific = chosen[COMMON_ONLY], chosen[SPECIFIC_ONLY]
    budget = {g: profiling_per_budget(test, g) for g in STRESSED_GPUS}
    print("\n4. profiling one stream-window (median) per stream GPU-seconds of a window: "
          + ", ".join(f"{budget[g]:.2f} at {g} GPU" for g in STRESSED_GPUS))  # fmt: skip
    g1, g2 = STRESSED_GPUS
    print()
    print(
        result_line(
            {
                "outcome_sd": round(outcome_sd, 4),
                "estimate_sd": round(estimate_sd, 4),
                "estimate_bias_abs": round(bias_abs, 4),
                f"gain{g1}_at_outcome_sd": round(at_sd[g1], 4),
                f"gain{g2}_at_outcome_sd": round(at_sd[g2], 4),
                f"gain{g1}_common_only": round(common[g1], 4),
                f"gain{g2}_common_only": round(common[g2], 4),
                f"gain{g1}_specific_only": round(specific[g1], 4),
                f"gain{g2}_specific_only": round(specific[g2], 4),
                f"profiling_per_budget_{g1}gpu": round(budget[g1], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
