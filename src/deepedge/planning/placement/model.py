"""MVSP documents: the placement problem (input) and the placement solution (output).

Notation follows Bensalem et al., "Modeling of DNN placement and inference in edge
computing" (MVSP):

* sources ``i`` (IoT nodes) ask for models ``m`` at rate ``r_m^i`` (requests/s) within a
  round-trip latency limit ``Lmax_m^i`` (ms);
* edge nodes ``e`` have memory ``C^e`` (MB) and a speed factor ``s_e`` relative to the
  device the variant latencies were measured on (1.0 = that device, 2.0 = twice as slow);
* a variant ``(m, v)`` has exclusive latency ``L_mv`` (ms, reference device), memory
  ``R_mv`` (MB), maximum stable load ``Load_mv`` (requests/s) and interference
  coefficient ``alpha_mv``. On node ``e``: ``L_mv^e = s_e L_mv`` and
  ``Load_mv^e = Load_mv / s_e`` (a slower device serves proportionally fewer requests);
* links carry one-way delays (ms); ``CL^ie`` is the shortest-path round trip (eq. 2,
  both directions);
* ``K`` bounds the number of model-variant instances on one node (``K = 1``: no GPU
  sharing), ``alpha`` weighs the average latency against the average utilisation cost.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

NodeId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ModelId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
VariantId = Annotated[str, StringConstraints(min_length=1, max_length=200)]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Link(BaseModel):
    """An undirected network link with its one-way delay ``d_l`` in ms."""

    model_config = _FROZEN
    a: NodeId
    b: NodeId
    delay_ms: float = Field(ge=0.0, allow_inf_nan=False)


class EdgeNode(BaseModel):
    """An edge node: memory capacity ``C^e`` and speed factor ``s_e`` (>= slower)."""

    model_config = _FROZEN
    id: NodeId
    memory_mb: float = Field(gt=0.0, allow_inf_nan=False)
    speed_factor: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)


class Variant(BaseModel):
    """A model variant (for example one batch size) and its measured profile."""

    model_config = _FROZEN
    id: VariantId
    batch_size: int | None = Field(default=None, ge=1)
    latency_ms: float = Field(gt=0.0, allow_inf_nan=False)
    memory_mb: float = Field(gt=0.0, allow_inf_nan=False)
    max_load_rps: float = Field(gt=0.0, allow_inf_nan=False)
    interference_coeff: float = Field(default=0.1, ge=0.0, le=10.0, allow_inf_nan=False)


class InferenceModel(BaseModel):
    """A DNN model ``m`` with its variants ``V_m``."""

    model_config = _FROZEN
    id: ModelId
    variants: list[Variant] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_variants(self) -> InferenceModel:
        ids = [v.id for v in self.variants]
        if len(set(ids)) != len(ids):
            raise ValueError(f"variants: duplicate variant id in model {self.id!r}")
        return self


class Demand(BaseModel):
    """Requests of one source for one model: rate ``r_m^i`` and limit ``Lmax_m^i``."""

    model_config = _FROZEN
    model: ModelId
    rate_rps: float = Field(gt=0.0, allow_inf_nan=False)
    max_latency_ms: float = Field(gt=0.0, allow_inf_nan=False)


class Source(BaseModel):
    """An IoT node sending inference requests."""

    model_config = _FROZEN
    id: NodeId
    demands: list[Demand] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_demand_per_model(self) -> Source:
        models = [d.model for d in self.demands]
        if len(set(models)) != len(models):
            raise ValueError(f"demands: source {self.id!r} lists a model twice")
        return self


class UtilisationCost(BaseModel):
    """phi(u) = scale * (exp(rate * u) - 1), approximated by its tangents (eqs. 6-7).

    The optimised cost of node ``e`` is ``z_e = max(0, max_k y_k(u_e))`` where ``y_k`` is the
    tangent of ``phi`` at ``tangent_points[k]``; this piecewise-linear function is the
    cost the MILP, the heuristic and the checker all use.
    """

    model_config = _FROZEN
    kind: Literal["exponential"] = "exponential"
    scale: float = Field(default=1.0 / (math.exp(5.0) - 1.0), gt=0.0, allow_inf_nan=False)
    rate: float = Field(default=5.0, gt=0.0, le=50.0, allow_inf_nan=False)
    tangent_points: list[float] = Field(
        default_factory=lambda: [k / 10.0 for k in range(11)], min_length=1
    )

    @model_validator(mode="after")
    def _points_in_range(self) -> UtilisationCost:
        if any(not 0.0 <= p <= 1.0 for p in self.tangent_points):
            raise ValueError("tangent_points: every point must lie in [0, 1]")
        return self

    def lines(self) -> list[tuple[float, float]]:
        """Tangent lines ``(intercept, slope)``: y_k(u) = phi(u_k) + phi'(u_k) (u - u_k)."""
        out = []
        for u in self.tangent_points:
            value = self.scale * (math.exp(self.rate * u) - 1.0)
            slope = self.scale * self.rate * math.exp(self.rate * u)
            out.append((value - slope * u, slope))
        return out

    def cost(self, utilisation: float) -> float:
        """The piecewise-linear cost ``max(0, max_k y_k(u))``."""
        return max(0.0, *(a + b * utilisation for a, b in self.lines()))

    def exact(self, utilisation: float) -> float:
        """The exponential ``phi(u)`` itself (reported beside the optimised cost)."""
        return self.scale * (math.exp(self.rate * utilisation) - 1.0)


class PlacementProblem(BaseModel):
    """A complete MVSP instance (input document of ``deepedge plan place``)."""

    model_config = _FROZEN
    name: str = "placement"
    sources: list[Source] = Field(min_length=1)
    edge_nodes: list[EdgeNode] = Field(min_length=1)
    relays: list[NodeId] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    models: list[InferenceModel] = Field(min_length=1)
    max_colocated: int = Field(default=2, ge=1, le=64, description="K")
    latency_weight: float = Field(default=0.1, ge=0.0, le=1.0, description="alpha")
    cost: UtilisationCost = Field(default_factory=UtilisationCost)

    @model_validator(mode="after")
    def _references(self) -> PlacementProblem:
        names = [s.id for s in self.sources] + [e.id for e in self.edge_nodes] + self.relays
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[0]
            raise ValueError(f"node id {dup!r} is used twice (sources, edge_nodes, relays)")
        known = set(names)
        for k, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in known:
                    raise ValueError(f"links.{k}: unknown node {end!r}")
        model_ids = [m.id for m in self.models]
        if len(set(model_ids)) != len(model_ids):
            raise ValueError("models: duplicate model id")
        for s in self.sources:
            for d in s.demands:
                if d.model not in model_ids:
                    raise ValueError(f"sources.{s.id}.demands: unknown model {d.model!r}")
        return self


class Method(StrEnum):
    """How a solution was computed."""

    MILP = "milp"
    HEURISTIC = "heuristic"
    AUTO = "auto"


class SolveStatus(StrEnum):
    """Outcome of one solve.

    ``OPTIMAL``: proven within the relative gap tolerance; ``FEASIBLE``: a checked solution
    without optimality proof; ``INFEASIBLE``: proven to have no solution; ``NO_SOLUTION``: the
    method stopped (time or search limit) without a feasible solution and without a proof.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"


class InstancePlacement(BaseModel):
    """``n_mv^e`` instances of variant ``v`` of model ``m`` on node ``e``."""

    model_config = _FROZEN
    node: NodeId
    model: ModelId
    variant: VariantId
    instances: int = Field(ge=1)
    load_rps: float = Field(ge=0.0)
    max_load_rps: float = Field(gt=0.0)


class Route(BaseModel):
    """Where the requests of one (source, model) go (``x_mv^ie = 1``) and their latency."""

    model_config = _FROZEN
    source: NodeId
    model: ModelId
    node: NodeId
    variant: VariantId
    rate_rps: float
    comm_latency_ms: float
    inference_latency_ms: float
    latency_ms: float
    max_latency_ms: float


class NodeUsage(BaseModel):
    """Per-node memory utilisation ``u_e`` and utilisation cost ``z_e``."""

    model_config = _FROZEN
    node: NodeId
    instances: int
    memory_used_mb: float
    utilisation: float
    cost: float


class SolverReport(BaseModel):
    """What the solver itself said: its status text, bound and gap, limits used."""

    model_config = _FROZEN
    name: str
    model_status: str
    time_s: float | None = None
    time_limit_s: float | None = None
    mip_rel_gap: float | None = None
    mip_nodes: int | None = None
    columns: int | None = None
    rows: int | None = None
    warm_started: bool = False


class PlacementSolution(BaseModel):
    """Decision of ``deepedge plan place``: placement ``n``, routing ``x``, figures."""

    model_config = _FROZEN
    problem: str
    method: Method
    status: SolveStatus
    objective: float | None = None
    bound: float | None = Field(default=None, description="proven lower bound")
    gap: float | None = Field(default=None, description="(objective - bound) / objective")
    avg_latency_ms: float | None = None
    avg_cost: float | None = None
    placements: list[InstancePlacement] = Field(default_factory=list)
    routes: list[Route] = Field(default_factory=list)
    nodes: list[NodeUsage] = Field(default_factory=list)
    solver: SolverReport | None = None
    explanation: list[str] = Field(default_factory=list)


def relative_gap(objective: float, bound: float) -> float:
    """``(objective - bound) / max(|objective|, tiny)``, clipped at 0 from below."""
    return max(0.0, (objective - bound) / max(abs(objective), 1e-12))


def placement_schemas() -> dict[str, dict[str, object]]:
    """JSON Schemas of the documents, keyed by their file name in ``docs/schemas/``."""
    return {
        "placement-problem.schema.json": PlacementProblem.model_json_schema(),
        "placement-solution.schema.json": PlacementSolution.model_json_schema(),
    }
