"""The thief scheduler (Ekya Algorithm 1) and PickConfigs (Algorithm 2).

Allocations are integer multiples of the quantum ``Delta``; ``K = floor(G / Delta)`` quanta
are shared by the jobs ``J`` = one inference job per stream plus one retraining job per
stream that has retraining configurations.

Algorithm 1::

    best = fair_allocation(J)                   # K // |J| quanta each, remainder to the first
    best_value = PickConfigs(best)
    for thief in J:
        for victim in J \\ {thief}:
            temp = best
            loop:
                temp[victim] -= 1; temp[thief] += 1
                if temp[victim] < 0: break
                value = PickConfigs(temp)
                if value > best_value: best, best_value = temp, value
                else: break

PickConfigs (Algorithm 2) is separable over streams: for every stream it takes the most
accurate inference config that keeps up within ``I_v`` and meets ``a_min``, and the retraining
config (or none) with the highest EstimateAccuracy; the value is the mean over streams. A
value is the pair ``(-total a_min shortfall, mean accuracy)`` compared lexicographically, so
an infeasible fair start is first repaired. Because only the thief's and the victim's streams
change per step, per-stream answers are memoised by ``(I_v, R_v)``; this is an exact
speed-up, the decisions are those of the algorithm as written. The pass over all thieves is
repeated until a pass improves nothing (``max_passes`` caps it; 1 is the paper's single pass).

Plateaus. An inference job's accuracy is a step function of its allocation: it changes only
where the allocation reaches the ``gpu_demand`` of a further configuration. A thief inference
job one quantum into a plateau gains nothing, and the loop above would stop there even when
the next configuration is worth its price. So when a single quantum does not improve and the
thief is an inference job, the same steal is also tried with as many quanta as bring the
thief to its next demand level (one extra PickConfigs per stop); it is kept only if it
improves, so every kept step still raises the window accuracy. A retraining job has the same
kind of plateau: a configuration becomes possible only where the allocation lets it finish
within ``T`` (``ceil(c_g s / (T Delta))`` quanta), so a retraining thief jumps to its next
such level in the same way. Finally, when neither step improves, a *paired steal* takes one
quantum from each of the victim stream's two jobs at once (a stream whose inference and
retraining both hold more than they are worth gives up both); also kept only if it improves.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from deepedge.core.errors import InfeasibleError
from deepedge.planning.window.accuracy import (
    Horizon,
    HorizonContext,
    StreamChoice,
    best_stream_choice,
    reference_factor,
)
from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem

_IMPROVE_EPS = 1e-12


def total_quanta(problem: WindowProblem) -> int:
    """``K = floor(G / Delta)`` (with a tolerance for binary fractions like 3 / 0.1)."""
    return int(problem.gpus / problem.delta_gpus + 1e-9)


@dataclass
class _StreamTable:
    """Memo of PickConfigs' per-stream answers, keyed by (inference, retraining) quanta."""

    problem: WindowProblem
    horizon: Horizon | None = None
    cache: list[dict[tuple[int, int], StreamChoice]] = field(default_factory=list)
    contexts: list[HorizonContext | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        p = self.problem
        self.cache = [{} for _ in p.streams]
        share = p.gpus / len(p.streams)
        self.contexts = [
            None
            if self.horizon is None
            else HorizonContext(self.horizon, p.period_s or p.window_s, reference_factor(s, share))
            for s in p.streams
        ]

    def choice(self, stream_index: int, inf_q: int, ret_q: int) -> StreamChoice:
        memo = self.cache[stream_index]
        key = (inf_q, ret_q)
        hit = memo.get(key)
        if hit is None:
            p = self.problem
            hit = best_stream_choice(
                p.streams[stream_index],
                inf_q * p.delta_gpus,
                ret_q * p.delta_gpus,
                p.window_s,
                p.a_min,
                self.contexts[stream_index],
            )
            memo[key] = hit
        return hit


def _value(choices: list[StreamChoice]) -> tuple[float, float]:
    shortfall = sum(c.shortfall_gpus for c in choices)
    return (-shortfall, sum(c.value for c in choices) / len(choices))


def _better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    if a[0] > b[0] + _IMPROVE_EPS:
        return True
    if a[0] < b[0] - _IMPROVE_EPS:
        return False
    return a[1] > b[1] + _IMPROVE_EPS


def pick_configs(
    problem: WindowProblem, alloc_q: list[int], table: _StreamTable | None = None
) -> tuple[list[StreamChoice], tuple[float, float]]:
    """Algorithm 2 for all streams; ``alloc_q[2v]`` inference, ``alloc_q[2v+1]`` retraining."""
    table = table or _StreamTable(problem)
    choices = [
        table.choice(v, alloc_q[2 * v], alloc_q[2 * v + 1]) for v in range(len(problem.streams))
    ]
    return choices, _value(choices)


def fair_allocation(problem: WindowProblem) -> list[int]:
    """Equal quanta to every job; retraining jobs exist only for streams with configs."""
    jobs = _jobs(problem)
    k = total_quanta(problem)
    alloc = [0] * (2 * len(problem.streams))
    share, extra = divmod(k, len(jobs))
    for rank, job in enumerate(jobs):
        alloc[job] = share + (1 if rank < extra else 0)
    return alloc


def _jobs(problem: WindowProblem) -> list[int]:
    """Inference jobs first (they get the remainder quanta), then retraining jobs."""
    n = len(problem.streams)
    inference = [2 * v for v in range(n)]
    retraining = [2 * v + 1 for v in range(n) if problem.streams[v].retraining_configs]
    return inference + retraining


def demand_levels(problem: WindowProblem, stream_index: int) -> list[int]:
    """Sorted distinct quanta at which the stream's inference configs start to keep up."""
    d = problem.delta_gpus
    configs = problem.streams[stream_index].inference_configs
    return sorted({_quanta_level(c.gpu_demand / d, problem) for c in configs})


def finish_levels(problem: WindowProblem, stream_index: int) -> list[int]:
    """Sorted distinct quanta at which the stream's retraining configs can finish in ``T``."""
    per_quantum_s = problem.window_s * problem.delta_gpus
    stream = problem.streams[stream_index]
    return sorted(
        {
            max(1, _quanta_level(c.gpu_seconds * stream.data_scale / per_quantum_s, problem))
            for c in stream.retraining_configs
        }
    )


def _quanta_level(quanta: float, problem: WindowProblem) -> int:
    """``ceil(quanta)``; anything beyond the server's quanta (even an overflow) is one more."""
    cap = total_quanta(problem) + 1
    return cap if not quanta < cap else math.ceil(quanta - 1e-9)


def _next_breakpoint(levels: list[int], quanta: int) -> int:
    """Smallest demand level above ``quanta`` (``quanta`` itself when there is none)."""
    i = bisect.bisect_right(levels, quanta)
    return levels[i] if i < len(levels) else quanta


def thief_allocation(
    problem: WindowProblem, max_passes: int = 20, horizon: Horizon | None = None
) -> tuple[list[int], list[StreamChoice]]:
    """Algorithm 1; returns quanta per job and the per-stream choices at that allocation.

    ``horizon``: maximise the horizon objective ``V`` (``accuracy``) instead of the
    window accuracy ``A_T`` (None, the paper's objective)."""
    table = _StreamTable(problem, horizon)
    jobs = _jobs(problem)
    n = len(problem.streams)
    # levels[job]: allocation breakpoints of job 2v (inference) and 2v + 1 (retraining).
    levels: list[list[int]] = []
    for v in range(n):
        levels += [demand_levels(problem, v), finish_levels(problem, v)]
    best = fair_allocation(problem)
    choices, best_value = pick_configs(problem, best, table)
    per_stream = list(choices)
    for _ in range(max_passes):
        improved = False
        for thief in jobs:
            for victim in jobs:
                if victim == thief:
                    continue
                temp = list(best)
                tv, vv = thief // 2, victim // 2
                sibling = victim ^ 1  # the victim stream's other job
                while True:
                    prev = list(temp)
                    temp[victim] -= 1
                    temp[thief] += 1
                    if temp[victim] < 0:
                        break
                    # Only the thief's and the victim's streams change: re-pick those.
                    trial = list(per_stream)
                    trial[tv] = table.choice(tv, temp[2 * tv], temp[2 * tv + 1])
                    trial[vv] = table.choice(vv, temp[2 * vv], temp[2 * vv + 1])
                    value = _value(trial)
                    if not _better(value, best_value):
                        # One quantum short of the next inference config (or of a retraining
                        # config that finishes in T) is a plateau: try the whole step up to
                        # the thief's next breakpoint.
                        jump = _next_breakpoint(levels[thief], temp[thief]) - temp[thief]
                        if 0 < jump <= temp[victim]:
                            temp[victim] -= jump
                            temp[thief] += jump
                            trial = list(per_stream)
                            trial[tv] = table.choice(tv, temp[2 * tv], temp[2 * tv + 1])
                            trial[vv] = table.choice(vv, temp[2 * vv], temp[2 * vv + 1])
                            value = _value(trial)
                    if not _better(value, best_value) and sibling != thief and prev[sibling] > 0:
                        # Paired steal: one quantum from each of the victim stream's jobs.
                        temp = list(prev)
                        temp[victim] -= 1
                        temp[sibling] -= 1
                        temp[thief] += 2
                        if temp[victim] >= 0:
                            trial = list(per_stream)
                            trial[tv] = table.choice(tv, temp[2 * tv], temp[2 * tv + 1])
                            trial[vv] = table.choice(vv, temp[2 * vv], temp[2 * vv + 1])
                            value = _value(trial)
                    if _better(value, best_value):
                        best, best_value, per_stream = list(temp), value, trial
                        improved = True
                    else:
                        break
        if not improved:
            break
    return best, per_stream


def plan_from_choices(
    problem: WindowProblem, kind: SchedulerKind, choices: list[StreamChoice]
) -> WindowPlan:
    """Decision document; raises InfeasibleError when some stream breaks ``a_min``."""
    short = [
        f"{s.stream_id} short of {c.shortfall_gpus:.3g} GPUs"
        for s, c in zip(problem.streams, choices, strict=True)
        if c.shortfall_gpus > 0.0
    ]
    if short:
        raise InfeasibleError(
            f"{len(short)} stream(s) cannot keep accuracy >= a_min={problem.a_min} "
            f"with {problem.gpus} GPUs",
            reasons=short,
        )
    decisions = [c.to_decision(s.stream_id) for s, c in zip(problem.streams, choices, strict=True)]
    return WindowPlan(
        scheduler=kind,
        window_s=problem.window_s,
        gpus=problem.gpus,
        streams=decisions,
        mean_accuracy=sum(c.window_accuracy for c in choices) / len(choices),
        allocated_gpus=sum(c.inference_gpus + c.retraining_gpus for c in choices),
    )


@dataclass(frozen=True)
class ThiefScheduler:
    """Ekya's scheduler as a policy object: ``plan(problem) -> WindowPlan``.

    ``horizon``: None (default) is the paper's per-window objective; a :class:`Horizon`
    makes PickConfigs and the steals maximise the horizon objective instead, which also
    credits a retrained model in the next ``horizon.windows`` windows
    (:mod:`deepedge.planning.window.accuracy`). The plan still reports window accuracies.
    """

    max_passes: int = 20
    horizon: Horizon | None = None

    @property
    def kind(self) -> SchedulerKind:
        return SchedulerKind.THIEF

    def plan(self, problem: WindowProblem) -> WindowPlan:
        _, choices = thief_allocation(problem, self.max_passes, self.horizon)
        return plan_from_choices(problem, self.kind, choices)
