"""The output document of every sharding policy (Deep-Edge, fair, oracle).

A :class:`ShardPlan` lists every candidate worker with its shard ``d_i`` and batch ``b_i``
(both 0 when excluded) and, for an excluded worker, a named :class:`ExclusionReason` (and,
for a deadline, the app that blocks it). Shards of the selected workers sum to ``|M|``
exactly. ``feasible`` is False when no worker can be used; the plan then still says why
each one was excluded.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deepedge.core.errors import InfeasibleError


class Policy(StrEnum):
    DEEP_EDGE = "deep-edge"  # Algorithm 1
    FAIR = "fair"  # equal shards over all workers, each at its max batch
    ORACLE = "oracle"  # exact: every subset and every feasible batch, by Total_cost (N <= 6)
    DEEP_EDGE_PLUS = "deep-edge-plus"  # Deep-Edge+: deadline-aware batches, by Total_cost


class ExclusionReason(StrEnum):
    """Why a worker got ``d_i = b_i = 0``."""

    DEADLINE = "background-app-deadline"  # an app of the worker would miss delta_a
    SLOWER_WITH_IT = "removing-it-made-epoch-faster"  # Algorithm 1's outer loop dropped it
    MEMORY = "min-batch-exceeds-memory"  # GetMaxBatchSize found no batch >= b_min that fits
    NOT_IN_OPTIMUM = "not-in-optimal-subset"  # the oracle's best subset leaves it out
    ROUNDED_TO_ZERO = "shard-rounded-to-zero"  # its proportional share was below one sample
    BATCH_ABOVE_DATA = "min-batch-exceeds-data-set"  # b_min > |M|: no shard can hold a batch
    NOT_SELECTED = "leaving-it-out-lowers-total-cost"  # Deep-Edge+'s search left it out


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Blocker(_Document):
    """The background app that rules a worker out, with its estimated pressure."""

    app: str
    pressure_s: float  # estimated execution time while training runs
    deadline_s: float
    margin: float = 0.0  # excluded when pressure_s * (1 + margin) > deadline_s

    def describe(self) -> str:
        """E.g. ``sift-1 would take 0.231 s > deadline 0.2 s``."""
        if self.margin:
            return (
                f"{self.app} would take {self.pressure_s:.3f} s, {self.margin:g} margin "
                f"included {self.pressure_s * (1 + self.margin):.3f} s > deadline "
                f"{self.deadline_s:g} s"
            )
        return f"{self.app} would take {self.pressure_s:.3f} s > deadline {self.deadline_s:g} s"


class WorkerAssignment(_Document):
    id: str
    selected: bool
    shard: int = Field(ge=0, description="d_i: samples assigned (0 when excluded)")
    batch_size: int = Field(ge=0, description="b_i (0 when excluded)")
    t_total_s_per_sample: float | None = Field(
        default=None, description="t_compute + t_update / b, as estimated when planning"
    )
    epoch_time_s: float | None = Field(default=None, description="d_i * t_total_i")
    exclusion: ExclusionReason | None = None
    blocker: Blocker | None = None


class ShardPlan(_Document):
    policy: Policy
    feasible: bool
    workers: list[WorkerAssignment]
    dataset_size: int
    epoch_time_s: float | None = Field(
        default=None, description="predicted max_i epochTime_i (estimates)"
    )
    total_cost_s: float | None = Field(
        default=None, description="predicted Total_cost incl. transfer, init, numEpoch epochs"
    )
    iterations: int = Field(
        default=0,
        ge=0,
        description=(
            "search effort: Algorithm 1's inner iterations, Deep-Edge+'s scored configurations"
        ),
    )

    @property
    def selected_ids(self) -> list[str]:
        return [w.id for w in self.workers if w.selected]

    @property
    def shards(self) -> dict[str, int]:
        return {w.id: w.shard for w in self.workers}

    @property
    def batch_sizes(self) -> dict[str, int]:
        return {w.id: w.batch_size for w in self.workers}

    def require_feasible(self) -> ShardPlan:
        """Return the plan, or raise :class:`InfeasibleError` naming every blocker."""
        if not self.feasible:
            summary = self.infeasibility_summary()
            raise InfeasibleError(f"no feasible worker: {summary}", reasons=summary.split("; "))
        return self

    def infeasibility_summary(self) -> str:
        """One line saying why every worker is out, e.g. ``w1: sift 0.23 s > 0.20 s``."""
        parts = []
        for w in self.workers:
            if w.selected:
                continue
            if w.blocker is not None:
                parts.append(f"{w.id}: {w.blocker.describe()}")
            else:
                parts.append(f"{w.id}: {w.exclusion.value if w.exclusion else 'excluded'}")
        return "; ".join(parts)


def plan_schema() -> dict[str, Any]:
    """JSON Schema of :class:`ShardPlan` (committed as docs/schemas/shard-plan)."""
    return ShardPlan.model_json_schema()
