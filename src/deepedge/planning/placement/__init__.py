"""MVSP: model-variant selection, placement and request routing (the exact MILP, the
heuristic with local and large-neighbourhood search, the Lagrangian bound, the checker).

A placement policy is ``(problem, time_limit_s, mip_rel_gap, bound_time_limit_s) ->
PlacementSolution`` (:class:`PlacementPolicy`); it raises
:class:`~deepedge.core.errors.InfeasibleError` with one reason per blocked demand. Every
caller picks its policy by :class:`~deepedge.planning.placement.model.Method` from
:data:`PLACEMENT_POLICIES` (:func:`plan_placement` does it for one call). The solvers'
libraries (SciPy, HiGHS, networkx) are imported only when a policy runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from deepedge.core.registry import look_up
from deepedge.planning.placement.model import Method, PlacementProblem, PlacementSolution
from deepedge.planning.placement.policies import plan_auto, plan_heuristic, plan_milp


class PlacementPolicy(Protocol):
    def __call__(
        self,
        problem: PlacementProblem,
        time_limit_s: float = 60.0,
        mip_rel_gap: float = 1e-4,
        bound_time_limit_s: float | None = None,
    ) -> PlacementSolution: ...


PLACEMENT_POLICIES: Mapping[Method, PlacementPolicy] = {
    Method.MILP: plan_milp,  # exact (HiGHS), warm-started from the heuristic
    Method.HEURISTIC: plan_heuristic,  # greedy + local search + LNS, with a proven bound
    Method.AUTO: plan_auto,  # the MILP when small enough to gain from it, else the heuristic
}


def placement_policy(name: Method | str) -> PlacementPolicy:
    """The policy called ``name``; an unknown name is bad input."""
    return look_up(PLACEMENT_POLICIES, Method, name, "placement method", "method")


def plan_placement(
    problem: PlacementProblem,
    method: Method | str = Method.AUTO,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    bound_time_limit_s: float | None = None,
) -> PlacementSolution:
    """Decide variants, instances and routes with the policy ``method``; raise
    InfeasibleError with reasons."""
    return placement_policy(method)(problem, time_limit_s, mip_rel_gap, bound_time_limit_s)
