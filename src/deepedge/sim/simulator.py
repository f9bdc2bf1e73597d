"""Trace-driven simulator of an Ekya edge server: replays an :class:`EkyaTrace` under a scheduler.

Per window, at ``t = 0`` the scheduler plans from the *estimated* profile; the simulator then
plays the *true* one. Between events allocations are constant; a running retraining job of
stream ``v`` does ``R_v`` GPU-seconds of work per second and finishes when the true
``gpu_seconds`` are done, at which point the stream's model switches to the true
``accuracy_after``. Instantaneous accuracy is the deployed accuracy times the inference
config's factor; the window accuracy is its time average. Events that re-run the scheduler
on the rest of the window (``T - t``):

* a retraining job completes (Ekya Sec. 4.2);
* a running job passes half of its work and its observed accuracy (the true value, as a
  checkpoint evaluation would show) departs from the estimate by more than
  ``deviation_tolerance``: the estimate is corrected, the config kept and only the
  allocation re-decided (Ekya Sec. 5).

Work of a job unfinished at the window's end is dropped. Every problem carries the length of
a whole window (``period_s``) and, per stream, the mean of the drifts it has shown so far
(this window's included: the accuracy drop at its start is observed), which a
horizon-aware scheduler uses; the paper's objective ignores both. When a retraining came out worse
than estimated and left a model below ``a_min``, later plans use the floor that is still
reachable (the lowest of the streams' best accuracies) instead of failing. Optionally
(:class:`Pruning`) the configurations offered per window are those the micro-profiler's
pruning keeps. Rows of a recorded trace that carry ``start_accuracy`` are first carried
over to each stream's own starting accuracy (:mod:`deepedge.sim.outcome_transfer`), so a
scheduler is credited only with what retraining does from the model it actually deployed.
The scheduler is any :class:`~deepedge.planning.window.WindowScheduler`; planning code runs
unchanged.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import ValidationError

from deepedge.core.errors import InvalidInputError, describe_validation_error
from deepedge.planning.window import WindowScheduler
from deepedge.planning.window.config_pruning import ConfigHistory, Outcome
from deepedge.planning.window.documents import (
    RetrainingConfig,
    SchedulerKind,
    StreamWindow,
    WindowPlan,
    WindowProblem,
)
from deepedge.planning.window.estimate_calibration import CalibrationSpec, EstimateCalibration
from deepedge.planning.window.reprofiling import ReprofileSpec, reprofiled_estimates
from deepedge.sim.outcome_transfer import transfer_row
from deepedge.sim.trace import EkyaTrace, TraceRetraining, TraceStreamWindow, TraceWindow

logger = logging.getLogger(__name__)

_EPS = 1e-9


class JobState(enum.Enum):
    """Retraining job of a stream within a window: IDLE -> RUNNING -> DONE (or dropped)."""

    IDLE = "idle"
    RUNNING = "running"
    DONE = "done"


@dataclass
class _StreamState:
    accuracy: float
    state: JobState = JobState.IDLE
    config: TraceRetraining | None = None
    est_accuracy: float = 0.0
    work_done: float = 0.0
    checked: bool = False
    inference_factor: float = 0.0
    inference_gpus: float = 0.0
    retraining_gpus: float = 0.0


@dataclass(frozen=True)
class WindowOutcome:
    """What one window delivered (ground truth)."""

    index: int
    stream_accuracy: tuple[float, ...]
    min_accuracy: float
    plans: int
    retrained: tuple[str | None, ...]
    stream_inference_factor: tuple[float, ...] = ()
    stream_retraining_s: tuple[float, ...] = ()

    @property
    def mean_accuracy(self) -> float:
        return sum(self.stream_accuracy) / len(self.stream_accuracy)


@dataclass(frozen=True)
class SimulationResult:
    scheduler: SchedulerKind
    gpus: float
    windows: tuple[WindowOutcome, ...] = field(default_factory=tuple)
    window_s: float = 1.0

    @property
    def mean_accuracy(self) -> float:
        return sum(w.mean_accuracy for w in self.windows) / len(self.windows)

    @property
    def min_accuracy(self) -> float:
        return min(w.min_accuracy for w in self.windows)

    @property
    def mean_inference_factor(self) -> float:
        """Time-averaged accuracy factor of the inference configs run (1 = every frame, full
        resolution): what the inference side gave up to keep up within its allocation."""
        f = [x for w in self.windows for x in w.stream_inference_factor]
        return sum(f) / len(f)

    @property
    def retraining_time_frac(self) -> float:
        """Share of stream-time during which a retraining job held GPUs."""
        r = [x for w in self.windows for x in w.stream_retraining_s]
        return sum(r) / (len(r) * self.window_s) if r else 0.0


def _problem(
    trace: EkyaTrace,
    window: TraceWindow,
    states: list[_StreamState],
    gpus: float,
    left_s: float,
    drift: dict[str, float] | None = None,
) -> WindowProblem:
    rows = {r.stream_id: r for r in window.streams}
    streams: list[StreamWindow] = []
    for meta, st in zip(trace.streams, states, strict=True):
        configs: list[RetrainingConfig] = []
        if st.state is JobState.IDLE:
            configs = [
                RetrainingConfig(
                    name=c.name, accuracy_after=c.est_accuracy, gpu_seconds=c.est_gpu_seconds
                )
                for c in rows[meta.stream_id].retraining
            ]
        elif st.state is JobState.RUNNING:
            assert st.config is not None
            left = 1.0 - st.work_done / st.config.gpu_seconds if st.config.gpu_seconds else 0.0
            configs = [
                RetrainingConfig(
                    name=st.config.name,
                    accuracy_after=st.est_accuracy,
                    gpu_seconds=max(0.0, st.config.est_gpu_seconds * left),
                )
            ]
        streams.append(
            StreamWindow(
                stream_id=meta.stream_id,
                current_accuracy=st.accuracy,
                inference_configs=meta.inference_configs,
                retraining_configs=configs,
                drift_per_window=(drift or {}).get(meta.stream_id, 0.0),
            )
        )
    # A retraining that came out worse than estimated can leave a model below a_min; no
    # schedule can then keep the floor, so this plan's floor is what is still reachable.
    reachable = min(
        s.current_accuracy * max(c.accuracy_factor for c in s.inference_configs) for s in streams
    )
    a_min = min(trace.a_min, reachable)
    if a_min < trace.a_min:
        logger.debug("a_min lowered to %.4f: a model fell below the floor", a_min)
    try:
        return WindowProblem(
            window_s=left_s,
            gpus=gpus,
            delta_gpus=trace.delta_gpus,
            a_min=a_min,
            period_s=trace.window_s,
            streams=streams,
        )
    except ValidationError as exc:
        raise InvalidInputError(
            f"trace yields an invalid window problem: {describe_validation_error(exc)}"
        ) from exc


def _apply(
    trace: EkyaTrace, window: TraceWindow, states: list[_StreamState], plan: WindowPlan
) -> None:
    rows = {r.stream_id: r for r in window.streams}
    for meta, st in zip(trace.streams, states, strict=True):
        d = plan.decision(meta.stream_id)
        factors = {c.name: c.accuracy_factor for c in meta.inference_configs}
        st.inference_factor = 0.0 if d.inference_config is None else factors[d.inference_config]
        st.inference_gpus = d.inference_gpus
        st.retraining_gpus = 0.0
        if d.retraining_config is None or st.state is JobState.DONE:
            continue
        if st.state is JobState.IDLE:
            st.config = next(
                c for c in rows[meta.stream_id].retraining if c.name == d.retraining_config
            )
            st.est_accuracy = st.config.est_accuracy
            st.state = JobState.RUNNING
        st.retraining_gpus = d.retraining_gpus


def _simulate_window(
    trace: EkyaTrace,
    index: int,
    window: TraceWindow,
    states: list[_StreamState],
    scheduler: WindowScheduler,
    gpus: float,
    deviation_tolerance: float | None,
    drift: dict[str, float],
) -> WindowOutcome:
    horizon = trace.window_s
    integral = [0.0] * len(states)
    factor = [0.0] * len(states)
    busy = [0.0] * len(states)
    low = 1.0
    t = 0.0
    plans = 0
    retrained: list[str | None] = [None] * len(states)
    replan = True
    while t < horizon - _EPS:
        if replan:
            _apply(
                trace,
                window,
                states,
                scheduler.plan(_problem(trace, window, states, gpus, horizon - t, drift)),
            )
            plans += 1
            replan = False
        # Next event: a completion, a half-way checkpoint, or the window's end.
        t_next, who, what = horizon, -1, ""
        for v, st in enumerate(states):
            if st.state is not JobState.RUNNING or st.retraining_gpus <= _EPS:
                continue
            assert st.config is not None
            total = st.config.gpu_seconds
            done_at = t + max(0.0, total - st.work_done) / st.retraining_gpus
            if done_at < t_next:
                t_next, who, what = done_at, v, "done"
            if deviation_tolerance is not None and not st.checked and st.work_done < total / 2:
                half_at = t + (total / 2 - st.work_done) / st.retraining_gpus
                if half_at < t_next:
                    t_next, who, what = half_at, v, "check"
        dt = t_next - t
        for v, st in enumerate(states):
            inst = st.accuracy * st.inference_factor
            integral[v] += inst * dt
            factor[v] += st.inference_factor * dt
            if dt > _EPS:
                low = min(low, inst)
            if st.state is JobState.RUNNING:
                st.work_done += st.retraining_gpus * dt
                if st.retraining_gpus > _EPS:
                    busy[v] += dt
        t = t_next
        if who < 0:
            break
        st = states[who]
        assert st.config is not None
        if what == "done":
            st.accuracy = st.config.accuracy_after
            st.state = JobState.DONE
            retrained[who] = st.config.name
            replan = True
        else:
            st.checked = True
            if (
                deviation_tolerance is not None
                and abs(st.config.accuracy_after - st.est_accuracy) > deviation_tolerance
            ):
                st.est_accuracy = st.config.accuracy_after
                replan = True
    return WindowOutcome(
        index=index,
        stream_accuracy=tuple(x / horizon for x in integral),
        min_accuracy=low,
        plans=plans,
        retrained=tuple(retrained),
        stream_inference_factor=tuple(x / horizon for x in factor),
        stream_retraining_s=tuple(busy),
    )


@dataclass(frozen=True)
class Pruning:
    """The micro-profiler's pruning of configurations far from the Pareto front.

    One :class:`~deepedge.planning.window.config_pruning.ConfigHistory` per stream: a window offers
    the scheduler only the configurations the history keeps, then records their *estimated*
    outcomes (the profiler's output; the truth is never looked at).
    """

    max_gap: float = 0.05
    min_windows: int = 2


def _pruned(window: TraceWindow, histories: dict[str, ConfigHistory]) -> TraceWindow:
    rows: list[TraceStreamWindow] = []
    for row in window.streams:
        history = histories[row.stream_id]
        kept = history.keep(row.retraining)
        if kept:
            history.record([Outcome(c.name, c.est_accuracy, c.est_gpu_seconds) for c in kept])
        rows.append(row.model_copy(update={"retraining": kept}))
    return window.model_copy(update={"streams": rows})


def _calibrated(window: TraceWindow, calibrator: EstimateCalibration) -> TraceWindow:
    """``window`` with every accuracy estimate corrected from the calibrator's history."""
    rows: list[TraceStreamWindow] = []
    for row in window.streams:
        configs = [
            c.model_copy(
                update={
                    "estimated_accuracy_after": round(
                        calibrator.corrected(row.stream_id, c.name, c.est_accuracy), 6
                    )
                }
            )
            for c in row.retraining
        ]
        rows.append(row.model_copy(update={"retraining": configs}))
    return window.model_copy(update={"streams": rows})


def _reprofiled(window: TraceWindow, spec: ReprofileSpec) -> TraceWindow:
    """``window`` with the re-profiled candidates' estimates averaged over their profiles
    (:mod:`deepedge.planning.window.reprofiling`); rows without further profiles stay."""
    rows: list[TraceStreamWindow] = []
    for row in window.streams:
        profiles = {
            c.name: [c.est_accuracy, *(c.reprofiled_accuracy_after or [])] for c in row.retraining
        }
        estimates = reprofiled_estimates(profiles, spec)
        configs = [
            c.model_copy(update={"estimated_accuracy_after": round(estimates[c.name], 6)})
            for c in row.retraining
        ]
        rows.append(row.model_copy(update={"retraining": configs}))
    return window.model_copy(update={"streams": rows})


def _observe(
    trace: EkyaTrace, window: TraceWindow, outcome: WindowOutcome, calibrator: EstimateCalibration
) -> None:
    """Feed the calibrator the profiled estimate and the measured accuracy of every
    retraining that finished in ``window`` (uncorrected rows), then close the window."""
    rows = {r.stream_id: r for r in window.streams}
    for meta, name in zip(trace.streams, outcome.retrained, strict=True):
        if name is None:
            continue
        c = next(x for x in rows[meta.stream_id].retraining if x.name == name)
        calibrator.observe(meta.stream_id, name, c.est_accuracy, c.accuracy_after)
    calibrator.close_window()


def simulate(
    trace: EkyaTrace,
    scheduler: WindowScheduler,
    gpus: float | None = None,
    deviation_tolerance: float | None = 0.05,
    pruning: Pruning | None = None,
    calibration: CalibrationSpec | None = None,
    reprofile: ReprofileSpec | None = None,
    on_window: Callable[[WindowOutcome], None] | None = None,
) -> SimulationResult:
    """Replay every window of ``trace`` on ``gpus`` (default: the trace's) under ``scheduler``.

    ``pruning``: offer the scheduler only the configurations the micro-profiler would still
    profile (None: all of them). ``calibration``: correct the accuracy estimates offered to
    the scheduler with the residuals (measured - estimated) of the retrainings that finished
    in *earlier* windows (:mod:`deepedge.planning.window.estimate_calibration`; None: as profiled).
    ``reprofile``: offer the mean of a recorded trace's independent profiles for each
    stream's candidate configurations (:mod:`deepedge.planning.window.reprofiling`; None:
    the first profile only). ``on_window`` gets each window's outcome as it is done.
    """
    g = trace.gpus if gpus is None else gpus
    if g <= 0:
        raise InvalidInputError(f"gpus must be > 0, got {g}", field="gpus")
    histories = (
        None
        if pruning is None
        else {
            s.stream_id: ConfigHistory(pruning.max_gap, pruning.min_windows) for s in trace.streams
        }
    )
    calibrator = None if calibration is None else EstimateCalibration(calibration)
    accuracy = [s.initial_accuracy for s in trace.streams]
    outcomes: list[WindowOutcome] = []
    seen: dict[str, list[float]] = {s.stream_id: [] for s in trace.streams}
    for index, window in enumerate(trace.windows):
        drift = {r.stream_id: r.drift for r in window.streams}
        for sid, d in drift.items():
            seen[sid].append(d)
        shown = {sid: sum(ds) / len(ds) for sid, ds in seen.items()}
        states = [
            _StreamState(accuracy=max(meta.floor_accuracy, min(1.0, acc - drift[meta.stream_id])))
            for meta, acc in zip(trace.streams, accuracy, strict=True)
        ]
        if reprofile is not None:
            window = _reprofiled(window, reprofile)
        window = _transferred(trace, window, states)
        offered = window if histories is None else _pruned(window, histories)
        if calibrator is not None:
            offered = _calibrated(offered, calibrator)
        outcome = _simulate_window(
            trace, index, offered, states, scheduler, g, deviation_tolerance, shown
        )
        if calibrator is not None:
            _observe(trace, window, outcome, calibrator)
        logger.debug("window %d: mean accuracy %.4f", index, outcome.mean_accuracy)
        outcomes.append(outcome)
        if on_window is not None:
            on_window(outcome)
        accuracy = [st.accuracy for st in states]
    return SimulationResult(
        scheduler=scheduler.kind, gpus=g, windows=tuple(outcomes), window_s=trace.window_s
    )


def window_problem(trace: EkyaTrace, index: int = 0, gpus: float | None = None) -> WindowProblem:
    """The problem a scheduler sees at the start of window ``index`` if nothing was retrained.

    Deployed accuracies follow the drift of the trace from ``initial_accuracy``.
    """
    accuracy = {s.stream_id: s.initial_accuracy for s in trace.streams}
    for window in trace.windows[: index + 1]:
        for row in window.streams:
            floor = trace.stream(row.stream_id).floor_accuracy
            accuracy[row.stream_id] = max(floor, min(1.0, accuracy[row.stream_id] - row.drift))
    states = [_StreamState(accuracy=accuracy[s.stream_id]) for s in trace.streams]
    g = trace.gpus if gpus is None else gpus
    window = _transferred(trace, trace.windows[index], states)
    past = [{r.stream_id: r.drift for r in w.streams} for w in trace.windows[: index + 1]]
    shown = {s.stream_id: sum(p[s.stream_id] for p in past) / len(past) for s in trace.streams}
    return _problem(trace, window, states, g, trace.window_s, shown)


def _transferred(trace: EkyaTrace, window: TraceWindow, states: list[_StreamState]) -> TraceWindow:
    """``window`` with recorded outcomes carried over to each stream's starting accuracy."""
    start = {meta.stream_id: st.accuracy for meta, st in zip(trace.streams, states, strict=True)}
    rows = [transfer_row(r, start[r.stream_id]) for r in window.streams]
    return window.model_copy(update={"streams": rows})
