"""Lagrangian lower bound of MVSP: relax "one route per demand", solve each node exactly.

Relaxation. Dualise the assignment constraints (13) ``sum_c x_c = 1`` with free multipliers
``lambda_d``. For every feasible ``(x, n)`` the objective ``f = sum_e f_e`` equals
``sum_d lambda_d + sum_e (f_e - sum_{d -> e} lambda_d)``, and the node terms no longer share
anything, so

    L(lambda) = sum_d lambda_d + sum_e min_{T in O_e} Phi_e(T, lambda)  <=  f(x, n).

Node subproblem. Drop the load constraints (9) (a relaxation) and, with them, every reason
to hold a variant twice or to hold a variant ``g`` that another variant ``h`` of its model
*load-free dominates* (``L_h <= L_g``, ``R_h <= R_g``, ``alpha_h L_h <= alpha_g L_g``). An
option ``T`` of node ``e`` is a set of at most ``K`` load-free non-dominated variants that
fit ``C^e`` together, with ``S_T = sum_{h in T} alpha_h L_h^e`` and
``M_T = sum_{h in T} R_h``. Its value is

    Phi_e(T) = (1 - alpha)/N_E z_e(M_T / C^e)
               + sum_d min(0, min_{h in T, CL + (1 - alpha_h) L_h + S_T <= Lmax_d}
                                w r_d (CL_d^e + (1 - alpha_h) L_h^e + S_T) - lambda_d)

with ``w = alpha / R``: each demand is served at most once per node, when it pays. The
options are enumerated (the bound is not computed when a node has more than
``max_options``), so each ``min_T`` is exact.

Validity (proof). Take any feasible solution and node ``e``; map every used pair ``g`` on
``e`` to a load-free non-dominated variant ``h(g)`` of its model that dominates it (or
itself) and let ``T`` be the image. Distinct members of ``T`` have distinct pre-images, so
``|T| <= sum n <= K``, ``M_T <= sum_g R_g n_g <= C^e`` (hence ``z(M_T) <= z_e``, ``z`` being
non-decreasing) and ``S_T - alpha_h L_h <= S_e - alpha_g L_g`` for ``h = h(g)``. A demand
routed to ``(g, e)`` therefore has ``CL + (1 - alpha_h) L_h + S_T = CL + L_h + (S_T - alpha_h
L_h) <= CL + L_g + (S_e - alpha_g L_g) = CL + IL_g^e <= Lmax_d``: it is an allowed entry of
``T`` and costs no more than in the solution. So ``f_e - sum_{d -> e} lambda_d >=
Phi_e(T) >= min_T Phi_e``; summing over nodes gives ``L(lambda) <= f`` for *every*
``lambda``, in particular for the optimum. The bound reported is the largest ``L(lambda)``
seen during projected-free subgradient ascent (Polyak steps towards a target, usually the
heuristic's objective); the ascent only chooses which valid bound is reported.

Starting point: ``lambda_d`` = the least ``w r_d (CL + L)`` of ``d`` (its cost alone on an
idle node), where every node term is >= 0, so ``L`` starts at the routing bound.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import numpy as np

from deepedge.planning.placement.instance import FloatArray, IntArray, PlacementInstance

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _NodeTables:
    """One node's options and entries (entries sorted by demand)."""

    option_s: FloatArray  # (O,) S_T
    option_cost: FloatArray  # (O,) (1 - alpha)/N_E z(M_T / C^e)
    member: np.ndarray  # (H_e, O) bool: slot h in T
    slot_al: FloatArray  # (H_e,) alpha_h L_h^e
    demands: IntArray  # (D_e,) demands with an entry here, ascending
    entry_demand: IntArray  # (N,) position of the entry's demand in ``demands``
    entry_slot: IntArray  # (N,)
    entry_a: FloatArray  # (N,) w r (CL + (1 - alpha_h) L_h)
    entry_r: FloatArray  # (N,) w r
    entry_slack: FloatArray  # (N,) Lmax - CL - (1 - alpha_h) L_h
    slot_entries: list[IntArray]  # entries of each slot
    single: bool  # every demand has one entry here and w > 0: the sorted fast path applies


@dataclass(frozen=True)
class LagrangianBound:
    """The best bound found, the multipliers that gave it and the effort spent."""

    bound: float
    multipliers: FloatArray
    iterations: int
    start_bound: float


def load_free_kept(inst: PlacementInstance) -> np.ndarray:
    """Variants not load-free dominated by another variant of their model (node-free: the
    speed factor scales ``L`` and ``alpha L`` of every variant alike)."""
    lat, mem, al = inst.lat[:, 0], inst.g_mem, inst.g_alpha * inst.lat[:, 0]
    keep = np.ones(lat.size, dtype=bool)
    for g in range(lat.size):
        same = np.flatnonzero(inst.g_model == inst.g_model[g])
        for h in same:
            if h == g:
                continue
            le = lat[h] <= lat[g] and mem[h] <= mem[g] and al[h] <= al[g]
            strict = (lat[h], mem[h], al[h]) != (lat[g], mem[g], al[g])
            if le and (strict or h < g):
                keep[g] = False
                break
    return keep


def _tables(inst: PlacementInstance, max_options: int) -> list[_NodeTables] | None:
    kept = np.flatnonzero(load_free_kept(inst))
    w = inst.alpha / inst.total_rate
    w_cost = (1 - inst.alpha) / inst.n_nodes
    src, lmax, rate = inst.d_source, inst.d_lmax, inst.d_rate
    out = []
    for e in range(inst.n_nodes):
        slots = kept[inst.nmax[kept, e] >= 1]
        mem = inst.g_mem[slots]
        options: list[tuple[int, ...]] = [()]
        for size in range(1, min(inst.k_max, slots.size) + 1):
            for combo in itertools.combinations(range(slots.size), size):
                if mem[list(combo)].sum() <= inst.node_mem[e] * (1 + 1e-9):
                    options.append(combo)
                    if len(options) > max_options:
                        log.debug("node %d has more than %d options: no bound", e, max_options)
                        return None
        al = inst.g_alpha[slots] * inst.lat[slots, e]
        member = np.zeros((slots.size, len(options)), dtype=bool)
        for k, combo in enumerate(options):
            member[list(combo), k] = True
        option_s = al @ member
        used = mem @ member / inst.node_mem[e]
        option_cost = w_cost * np.maximum(
            0.0, np.max(inst.cost_lines[:, :1] + inst.cost_lines[:, 1:] * used[None, :], axis=0)
        )
        # entries: demand d may use slot h of its model when it meets Lmax alone
        ent_d, ent_h = [], []
        for k, g in enumerate(slots):
            ds = np.flatnonzero(inst.d_model == inst.g_model[g])
            ok = inst.comm_ms[src[ds], e] + inst.lat[g, e] <= lmax[ds] + 1e-9
            ent_d.append(ds[ok])
            ent_h.append(np.full(int(ok.sum()), k))
        d_all = np.concatenate(ent_d) if ent_d else np.zeros(0, dtype=np.int64)
        h_all = np.concatenate(ent_h) if ent_h else np.zeros(0, dtype=np.int64)
        order = np.lexsort((h_all, d_all))
        d_all, h_all = d_all[order], h_all[order]
        demands, pos = np.unique(d_all, return_inverse=True)
        g_all = slots[h_all]
        base = inst.comm_ms[src[d_all], e] + (1 - inst.g_alpha[g_all]) * inst.lat[g_all, e]
        out.append(
            _NodeTables(
                option_s=option_s,
                option_cost=option_cost,
                member=member,
                slot_al=al,
                demands=demands.astype(np.int64),
                entry_demand=pos.reshape(-1).astype(np.int64),
                entry_slot=h_all.astype(np.int64),
                entry_a=w * rate[d_all] * base,
                entry_r=w * rate[d_all],
                entry_slack=lmax[d_all] - base,
                slot_entries=[np.flatnonzero(h_all == k) for k in range(slots.size)],
                single=bool(w > 0 and demands.size == d_all.size),
            )
        )
    return out


def _node_min_single(t: _NodeTables, lam: FloatArray) -> tuple[float, IntArray]:
    """:func:`_node_min` when each demand has one entry here: per slot, the demand terms
    ``min(0, r (S - theta))`` summed over the entries with ``S < v = min(theta, slack)``
    (``theta = (lambda - a) / r``, where the entry stops paying) are ``S R(S) - RT(S)``
    with suffix sums over the entries sorted by ``v``: no entry x option matrix. The
    slack test is widened by 2e-9, which can only lower the value (the bound stays valid).
    """
    theta = (lam[t.demands[t.entry_demand]] - t.entry_a) / t.entry_r
    v = np.minimum(theta, t.entry_slack + 2e-9)
    s_opt = t.option_s
    terms = np.zeros(t.member.shape)
    live_by_slot = []
    for h, idx in enumerate(t.slot_entries):
        live = idx[v[idx] > t.slot_al[h]]  # S_T >= alpha_h L_h wherever h is held
        live_by_slot.append(live)
        if live.size == 0:
            continue
        order = np.argsort(v[live])
        v_sorted = v[live][order]
        r = t.entry_r[live][order]
        zero = np.zeros(1)
        r_top = np.concatenate([zero, np.cumsum(r[::-1])])
        rt_top = np.concatenate([zero, np.cumsum((r * theta[live][order])[::-1])])
        above = v_sorted.size - np.searchsorted(v_sorted, s_opt, side="right")
        terms[h] = s_opt * r_top[above] - rt_top[above]
    total = t.option_cost + np.where(t.member, terms, 0.0).sum(axis=0)
    best = int(np.argmin(total))
    served = [
        live[v[live] > s_opt[best]]
        for h, live in enumerate(live_by_slot)
        if t.member[h, best] and live.size
    ]
    entries = np.concatenate(served) if served else np.zeros(0, dtype=np.int64)
    return float(total[best]), t.demands[t.entry_demand[entries]]


def _node_min(t: _NodeTables, lam: FloatArray) -> tuple[float, IntArray]:
    """``min_T Phi_e(T, lambda)`` and the demands served by a minimising option."""
    if t.single:
        # the matrix is cheaper while few entries can pay, the sorted sums once many can
        can_pay = lam[t.demands[t.entry_demand]] > t.entry_a + t.entry_r * t.slot_al[t.entry_slot]
        if int(np.count_nonzero(can_pay)) * t.option_s.size > 40_000:
            return _node_min_single(t, lam)
    return _node_min_matrix(t, lam)


def _node_min_matrix(t: _NodeTables, lam: FloatArray) -> tuple[float, IntArray]:
    """The general case: an entry x option matrix, the least entry of each demand."""
    lam_e = lam[t.demands[t.entry_demand]]
    # an entry can only pay in a T that holds its slot, where S_T >= alpha_h L_h: leave out
    # those that cannot pay even then (most of them, once lambda has settled)
    live = np.flatnonzero(lam_e > t.entry_a + t.entry_r * t.slot_al[t.entry_slot])
    if live.size == 0:
        k = int(np.argmin(t.option_cost))
        return float(t.option_cost[k]), t.demands[:0]
    val = t.entry_a[live, None] + t.entry_r[live, None] * t.option_s[None, :]
    val -= lam_e[live, None]
    allowed = t.member[t.entry_slot[live]] & (
        t.entry_slack[live, None] >= t.option_s[None, :] - 1e-9
    )
    val = np.where(allowed, np.minimum(val, 0.0), 0.0)
    dem = t.entry_demand[live]
    first = np.flatnonzero(np.r_[True, dem[1:] != dem[:-1]])
    per_demand = np.minimum.reduceat(val, first, axis=0)
    total = t.option_cost + per_demand.sum(axis=0)
    best = int(np.argmin(total))
    return float(total[best]), t.demands[dem[first[per_demand[:, best] < 0.0]]]


def lagrangian_bound(
    inst: PlacementInstance,
    target: float,
    max_iterations: int = 150,
    max_options: int = 5000,
) -> LagrangianBound | None:
    """Subgradient ascent on ``L(lambda)``; every value it reports is a proven lower bound
    (module docstring). ``target``: an objective to steer Polyak steps by (a feasible
    solution's). None when some node has more than ``max_options`` options."""
    tables = _tables(inst, max_options)
    if tables is None:
        return None
    lam = np.full(inst.n_demands, np.inf)
    for t in tables:
        alone = t.entry_a + t.entry_r * t.slot_al[t.entry_slot]
        np.minimum.at(lam, t.demands[t.entry_demand], alone)
    lam[~np.isfinite(lam)] = 0.0
    best, best_lam, step_scale, stall = -np.inf, lam.copy(), 1.0, 0
    start = -np.inf
    it = 0
    for it in range(1, max_iterations + 1):
        value = float(lam.sum())
        served = np.zeros(inst.n_demands)
        for t in tables:
            v, ds = _node_min(t, lam)
            value += v
            served[ds] += 1.0
        if it == 1:
            start = value
        log.debug("Lagrangian iteration %d: %.6g (step %.3g)", it, value, step_scale)
        if value > best + 1e-12:
            best, best_lam, stall = value, lam.copy(), 0
        else:
            stall += 1
            if stall >= 5:  # no progress: shorter steps
                step_scale, stall = step_scale / 2.0, 0
        grad = 1.0 - served
        norm = float(grad @ grad)
        if norm == 0.0 or step_scale < 1e-4 or target - value <= 1e-9 * abs(target):
            break
        lam = lam + step_scale * max(target - value, 0.0) / norm * grad
    return LagrangianBound(bound=best, multipliers=best_lam, iterations=it, start_bound=start)
