"""Exhaustive oracle for the retraining-window problem (Eq. 1 of Ekya) on small instances.

Sets: streams ``v``, quanta ``K = floor(G / Delta)``. Variables: integer quanta ``i_v, r_v >= 0``
and configurations. Objective: ``max (1/n) sum_v A_T(v, i_v, r_v)`` where ``A_T(v, i, r)`` is
the best EstimateAccuracy of stream ``v`` over all retraining configs (and none) with the
floor ``a_min`` enforced. Constraint: ``sum_v (i_v + r_v) <= K``.

Every ``(i_v, r_v)`` pair of every stream is evaluated (``O(n K^2 |Gamma|)``), then the
streams are combined exactly by a knapsack recursion over the budget::

    best_v(b) = max_{i + r = b} A_T(v, i, r)
    F_v(b)    = max_{b' <= b} F_{v-1}(b - b') + best_v(b')

which returns the same optimum as enumerating every joint allocation, at a fraction of the
cost. Use it as the limit on instances with ``K`` up to a few tens. With a
:class:`~deepedge.planning.window.accuracy.Horizon` the same recursion maximises the horizon
objective ``V`` instead of ``A_T`` (the limit of the horizon-aware thief).
"""

from __future__ import annotations

from dataclasses import dataclass

from deepedge.core.errors import InfeasibleError, InvalidInputError
from deepedge.planning.window.accuracy import (
    Horizon,
    HorizonContext,
    StreamChoice,
    best_stream_choice,
    reference_factor,
)
from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem
from deepedge.planning.window.thief import plan_from_choices, total_quanta

_NEG = float("-inf")

ORACLE_MAX_WORK = 260_000
"""Largest ``streams x (quanta + 1)^2`` the oracle takes on: 10 streams at 16 GPUs, Delta 0.1
(about half a minute on one core)."""


def _stream_frontier(
    problem: WindowProblem, v: int, k: int, horizon: Horizon | None = None
) -> list[StreamChoice | None]:
    """``best_v(b)`` for b = 0..K as the choice reaching it (None: no feasible split)."""
    stream = problem.streams[v]
    context = None
    if horizon is not None:
        share = problem.gpus / len(problem.streams)
        context = HorizonContext(
            horizon, problem.period_s or problem.window_s, reference_factor(stream, share)
        )
    q = problem.delta_gpus
    retrains = bool(stream.retraining_configs)
    best: list[StreamChoice | None] = [None] * (k + 1)
    for b in range(k + 1):
        for r in range(b + 1 if retrains else 1):
            c = best_stream_choice(
                stream, (b - r) * q, r * q, problem.window_s, problem.a_min, context
            )
            if c.shortfall_gpus > 0.0:
                continue
            cur = best[b]
            if cur is None or c.value > cur.value + 1e-12:
                best[b] = c
    return best


def oracle_choices(problem: WindowProblem, horizon: Horizon | None = None) -> list[StreamChoice]:
    """Optimal per-stream choices; raises InfeasibleError when ``a_min`` cannot be met."""
    k = total_quanta(problem)
    n = len(problem.streams)
    if n * (k + 1) ** 2 > ORACLE_MAX_WORK:
        raise InvalidInputError(
            f"the exhaustive oracle is for small instances: streams x (quanta + 1)^2 = "
            f"{n * (k + 1) ** 2} exceeds {ORACLE_MAX_WORK}; use the thief, or a larger "
            "delta_gpus",
            "delta_gpus",
        )
    frontiers = [_stream_frontier(problem, v, k, horizon) for v in range(n)]
    # value[b]: best accuracy sum of the streams seen so far within b quanta; picks: argmaxes.
    value = [0.0] * (k + 1)
    picks: list[list[int]] = []
    for v in range(n):
        new_value = [_NEG] * (k + 1)
        arg = [0] * (k + 1)
        for b in range(k + 1):
            if value[b] == _NEG:
                continue
            for extra in range(k + 1 - b):
                c = frontiers[v][extra]
                if c is None:
                    continue
                total = value[b] + c.value
                if total > new_value[b + extra] + 1e-12:
                    new_value[b + extra] = total
                    arg[b + extra] = extra
        picks.append(arg)
        value = new_value
    best_b = max(range(k + 1), key=lambda b: value[b])
    if value[best_b] == _NEG:
        raise InfeasibleError(
            f"no allocation of {problem.gpus} GPUs keeps every stream >= a_min={problem.a_min}"
        )
    choices: list[StreamChoice] = []
    b = best_b
    for v in range(n - 1, -1, -1):
        extra = picks[v][b]
        c = frontiers[v][extra]
        assert c is not None
        choices.append(c)
        b -= extra
    choices.reverse()
    return choices


@dataclass(frozen=True)
class OracleScheduler:
    """Exact optimum of the window problem on the quantised allocation grid (of the horizon
    objective when ``horizon`` is set)."""

    horizon: Horizon | None = None

    @property
    def kind(self) -> SchedulerKind:
        return SchedulerKind.ORACLE

    def plan(self, problem: WindowProblem) -> WindowPlan:
        return plan_from_choices(problem, self.kind, oracle_choices(problem, self.horizon))
