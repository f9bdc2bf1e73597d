"""Synthetic MVSP instances in the setting of the MVSP paper, with measured variant profiles.

Topology: the paper uses MANIAC ad hoc network traces, which are not available here. These
instances are **synthetic** connected ad hoc graphs: sources and edge nodes are dropped
uniformly in the unit square and linked when closer than a radius, grown until the graph is
connected (a random geometric graph, the usual model of an ad hoc network). Each link's
one-way delay is uniform on [0.25, 1.75] x 12.23 ms, so its mean is the paper's 12.23 ms.

Variants: real measurements. ``data/nexus_titanx_profiles/`` holds the forward latency and
memory of four DNNs per batch size on a TITAN X (Pascal), from the Nexus serving system
(University of Washington, BSD-style licence kept in that folder's ``LICENSE``). Variant
``b`` of a model is the model served at batch size ``b``:
``L_mv`` = forward latency of a batch of ``b`` (ms), ``R_mv`` = its memory (MB),
``Load_mv = b / L_mv`` (requests/s the batch-``b`` instance sustains). The default batch
sizes are 1, 2, 4, 6, 8, 12, 16, 24 (8 variants, the paper's ``V_m = 8``). Pre- and
post-processing are not part of the variant latency.

Documented assumptions: a node's ``speed_factor`` scales latency up and load down relative to
the TITAN X (1.0 = TITAN X-class edge server, 2.0 = a GPU half as fast); P1/P2 use 1.0
everywhere (one GPU type, as in the paper), larger instances mix 1.0, 1.5 and 2.0. Models
beyond the four profiled DNNs reuse a profile (another task served by the same architecture).
Request rates: each source's total rate has mean ``E(r)`` and is split evenly over the models
it requests, each rate drawn uniform on [0.5, 1.5] x its share. Latency limits are uniform
on ``latency_limit_ms``, raised where needed to 1.25 x the least latency the source can get
for the model (nearest fast-enough node, batch-1 variant), so every demand alone is servable.
``alpha = 0.1``, ``alpha_mv = 0.1``, ``C^e = 8 GB`` as in the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from importlib import resources

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra

from deepedge.planning.placement.model import (
    Demand,
    EdgeNode,
    InferenceModel,
    Link,
    PlacementProblem,
    Source,
    Variant,
)

PROFILE_FOLDER = ("data", "nexus_titanx_profiles")  # inside the deepedge.sim package
PROFILE_FILES = (
    "caffe_vgg16_1.txt",
    "caffe_vgg_face_1.txt",
    "caffe_vgg_s_1.txt",
    "darknet_yolo9000_1.txt",
)
DEFAULT_BATCHES = (1, 2, 4, 6, 8, 12, 16, 24)
MEAN_LINK_DELAY_MS = 12.23


@dataclass(frozen=True)
class ProfileRow:
    batch: int
    latency_ms: float
    memory_mb: float


@dataclass(frozen=True)
class ModelProfile:
    """One measured DNN: its name and forward-latency rows by batch size."""

    name: str
    rows: tuple[ProfileRow, ...]

    def row(self, batch: int) -> ProfileRow:
        for r in self.rows:
            if r.batch == batch:
                return r
        raise KeyError(f"{self.name} has no batch size {batch}")


def parse_profile(text: str) -> ModelProfile:
    """Parse a Nexus profile file (header line, device, 'Forward latency' table)."""
    lines = [ln.strip() for ln in text.splitlines()]
    name = lines[0].split(":")[1]
    start = lines.index("Forward latency") + 2
    rows = []
    for ln in lines[start:]:
        parts = ln.split(",")
        if len(parts) != 4 or not parts[0].isdigit():
            break
        rows.append(ProfileRow(int(parts[0]), float(parts[1]) / 1000.0, float(parts[3]) / 2**20))
    return ModelProfile(name, tuple(rows))


def load_profiles() -> tuple[ModelProfile, ...]:
    """The four bundled TITAN X profiles."""
    folder = resources.files("deepedge.sim").joinpath(*PROFILE_FOLDER)
    return tuple(parse_profile((folder / f).read_text()) for f in PROFILE_FILES)


def variants_from_profile(
    profile: ModelProfile, batches: tuple[int, ...] = DEFAULT_BATCHES, alpha_mv: float = 0.1
) -> list[Variant]:
    out = []
    for b in batches:
        r = profile.row(b)
        out.append(
            Variant(
                id=f"b{b}",
                batch_size=b,
                latency_ms=r.latency_ms,
                memory_mb=r.memory_mb,
                max_load_rps=b / (r.latency_ms / 1000.0),
                interference_coeff=alpha_mv,
            )
        )
    return out


@dataclass(frozen=True)
class ScenarioSpec:
    """Shape and parameters of one generated instance."""

    name: str
    n_sources: int
    n_nodes: int
    n_models: int
    mean_rate_rps: float = 5.5  # E(r): mean total request rate of one source
    models_per_source: int | None = None  # None: every source asks for every model
    max_colocated: int = 2
    latency_weight: float = 0.1
    alpha_mv: float = 0.1
    node_memory_mb: float = 8192.0
    speed_factors: tuple[float, ...] = (1.0,)
    latency_limit_ms: tuple[float, float] = (120.0, 200.0)
    seed: int = 0


P1 = ScenarioSpec("P1", 10, 5, 3)
P2 = ScenarioSpec("P2", 11, 4, 4)
MEDIUM = ScenarioSpec(
    "medium", 50, 15, 5, mean_rate_rps=22.0, speed_factors=(1.0, 1.5, 2.0), max_colocated=3
)
SCALE = ScenarioSpec(
    "scale",
    2000,
    200,
    10,
    mean_rate_rps=6.0,
    models_per_source=3,
    speed_factors=(1.0, 1.5, 2.0),
    max_colocated=4,
    latency_limit_ms=(70.0, 110.0),
)


def _ad_hoc_links(n: int, rng: np.random.Generator) -> list[tuple[int, int, float]]:
    pos = rng.random((n, 2))
    dist = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1))
    radius = 1.5 * math.sqrt(math.log(max(n, 2)) / (math.pi * n))
    while True:
        adj = (dist <= radius) & ~np.eye(n, dtype=bool)
        seen = np.zeros(n, dtype=bool)
        seen[0] = True
        frontier = [0]
        while frontier:
            nxt = np.flatnonzero(adj[frontier].any(axis=0) & ~seen)
            seen[nxt] = True
            frontier = nxt.tolist()
        if seen.all():
            break
        radius *= 1.1
    a, b = np.nonzero(np.triu(adj))
    delays = rng.uniform(0.25, 1.75, size=a.size) * MEAN_LINK_DELAY_MS
    return [(int(x), int(y), float(w)) for x, y, w in zip(a, b, delays, strict=True)]


def generate(
    spec: ScenarioSpec, profiles: tuple[ModelProfile, ...] | None = None
) -> PlacementProblem:
    """One instance, deterministic in ``spec.seed``."""
    profiles = profiles or load_profiles()
    rng = np.random.default_rng(spec.seed)
    order = rng.permutation(len(profiles))
    models = []
    for k in range(spec.n_models):
        prof = profiles[int(order[k % len(profiles)])]
        models.append(
            InferenceModel(
                id=f"{prof.name}-{k}",
                variants=variants_from_profile(prof, alpha_mv=spec.alpha_mv),
            )
        )
    n_total = spec.n_sources + spec.n_nodes
    node_slots = rng.permutation(n_total)
    names = [""] * n_total
    for k, slot in enumerate(node_slots[: spec.n_nodes]):
        names[int(slot)] = f"e{k}"
    for k, slot in enumerate(node_slots[spec.n_nodes :]):
        names[int(slot)] = f"s{k}"
    raw_links = _ad_hoc_links(n_total, rng)
    links = [Link(a=names[a], b=names[b], delay_ms=w) for a, b, w in raw_links]
    graph = coo_matrix(
        (
            [w + 1e-9 for _, _, w in raw_links],
            ([a for a, _, _ in raw_links], [b for _, b, _ in raw_links]),
        ),
        shape=(n_total, n_total),
    ).tocsr()
    node_slot = node_slots[: spec.n_nodes]
    one_way = dijkstra(graph, directed=False, indices=node_slot)  # (nodes, all)
    nodes = [
        EdgeNode(
            id=f"e{k}",
            memory_mb=spec.node_memory_mb,
            speed_factor=float(rng.choice(np.array(spec.speed_factors))),
        )
        for k in range(spec.n_nodes)
    ]
    speed = np.array([n.speed_factor for n in nodes])
    sources = []
    per_source = spec.models_per_source or spec.n_models
    lo, hi = spec.latency_limit_ms
    for k in range(spec.n_sources):
        chosen = sorted(rng.choice(spec.n_models, size=per_source, replace=False).tolist())
        share = spec.mean_rate_rps / per_source
        trip = 2.0 * one_way[:, int(node_slots[spec.n_nodes + k])]
        demands = []
        for m in chosen:
            floor = 1.25 * float(np.min(trip + speed * models[m].variants[0].latency_ms))
            demands.append(
                Demand(
                    model=models[m].id,
                    rate_rps=float(share * rng.uniform(0.5, 1.5)),
                    max_latency_ms=max(float(rng.uniform(lo, hi)), floor),
                )
            )
        sources.append(Source(id=f"s{k}", demands=demands))
    return PlacementProblem(
        name=spec.name,
        sources=sources,
        edge_nodes=nodes,
        links=links,
        models=models,
        max_colocated=spec.max_colocated,
        latency_weight=spec.latency_weight,
    )


def with_rate(spec: ScenarioSpec, mean_rate_rps: float) -> ScenarioSpec:
    """The same topology and draws at another mean request rate E(r)."""
    return replace(spec, mean_rate_rps=mean_rate_rps)


SMALL_SEED_BASE = 15_000  # random small instances: seeds the other benchmarks never use


def random_small(seed: int) -> ScenarioSpec:
    """A random small instance the MILP solves exactly in about a second.

    2-8 sources, 2-4 nodes, 1-3 models (each source asks for 1 to all of them), K 1-3,
    node memory 1.5-8 GB (so memory and K both bind), E(r) from light to beyond one
    TITAN X instance, mixed node speeds, loose to tight latency limits, alpha 0.1 or 0.5,
    alpha_mv 0.1 or 0.5. Deterministic in ``seed``.
    """
    rng = np.random.default_rng(seed)
    n_models = int(rng.integers(1, 4))
    lo = float(rng.choice([40.0, 70.0, 120.0]))
    return ScenarioSpec(
        name=f"small-{seed}",
        n_sources=int(rng.integers(2, 9)),
        n_nodes=int(rng.integers(2, 5)),
        n_models=n_models,
        mean_rate_rps=float(rng.choice([5.5, 22.0, 66.0, 150.0, 300.0])),
        models_per_source=int(rng.integers(1, n_models + 1)),
        max_colocated=int(rng.integers(1, 4)),
        latency_weight=float(rng.choice([0.1, 0.5])),
        alpha_mv=float(rng.choice([0.1, 0.5])),
        node_memory_mb=float(rng.choice([1500.0, 3000.0, 5120.0, 8192.0])),
        speed_factors=((1.0,), (1.0, 1.5, 2.0))[int(rng.integers(0, 2))],
        latency_limit_ms=(lo, lo * 1.6),
        seed=seed,
    )
