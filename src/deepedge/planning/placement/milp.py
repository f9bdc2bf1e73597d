"""Exact MVSP as a MILP solved with HiGHS: build -> solve(time limit, gap) -> decode.

Sets
    D  demands d = (i, m);  G  variants g = (m, v);  E  edge nodes;  Y  tangent lines k.
    C  candidates c = (d, g, e) (see ``instance``; only routes that can ever meet
       their latency limit, memory and load); P pairs p = (g, e) used by some candidate;
       Q  pairs (d, e) used by some candidate.
Parameters
    r_d, Lmax_d, CL_d^e (round trip), L_g^e, R_g, Load_g^e, alpha_g, C^e, K, alpha,
    tangent lines y_k(u) = a_k + b_k u, R = sum_d r_d, N_E = |E|,
    nmax_p = min(K, floor(C^e / R_g)), Smax_e an upper bound of S_e.
Variables
    x_c in {0, 1}      route d to variant g on node e            (x_mv^ie)
    n_p in {0..nmax_p} instances of g on e                        (n_mv^e)
    S_e >= 0           interference on e: sum_p alpha_g L_g^e n_p
    q_de >= 0          q_de = y_de S_e with y_de = sum_{c in (d, e)} x_c (exact McCormick)
    z_e >= 0           utilisation cost of e
    w_dep >= 0         share of pair p (on e) in q_de (only with ``strong=True``)
Objective (13)
    min alpha / R * sum_c r_d (CL_d^e + (1 - alpha_g) L_g^e) x_c + alpha / R * sum_de r_d q_de
        + (1 - alpha) / N_E * sum_e z_e
    (eq. 3 gives IL_g^e = (1 - alpha_g) L_g^e + S_e, so this is alpha L + (1 - alpha) C.)
Constraints
    [1] (13)  sum_{c in d} x_c = 1                                        for all d
    [2] (4)   sum_{c in (d,e)} (CL_d^e + (1 - alpha_g) L_g^e) x_c + q_de <= Lmax_d
    [3] McC   q_de >= S_e - Smax_e (1 - y_de)
    [4] tight q_de >= sum_{c in (d,e)} alpha_g L_g^e x_c     (valid: S_e >= alpha_g L_g^e n_p)
    [5] (9)   sum_{c in p} r_d x_c <= Load_p n_p                          for all p
    [6] (10)  x_c <= n_p                                                  for all c
    [7] tight n_p <= nmax_p sum_{c in p} x_c    (an unused instance only adds cost)
    [8] (11)  sum_{p on e} n_p <= K                                       for all e
    [9] (12)  sum_{p on e} R_g n_p <= C^e                                 for all e
    [10] def  S_e = sum_{p on e} alpha_g L_g^e n_p                        for all e
    [11] (7,8) z_e >= a_k + b_k sum_{p on e} R_g n_p / C^e                for all e, k
    [12] strong (optional) q_de >= sum_{p on e} w_dep,
                w_dep >= alpha_g L_g^e (n_p - nmax_p (1 - y_de))  for all (d, e), p on e:
                the McCormick bound of y_de n_p per pair, whose sum is tighter than [3]

Rows [12] close most of the LP gap (the interference of co-located instances) on small and
medium instances; they add one column per (d, e, p), so they are used below a size limit.
Rows [2] are left out where even the largest interference keeps every candidate within its
limit. With ``relax=True`` the same model is solved as an LP; its optimum is a proven lower
bound. HiGHS is imported lazily so that the rest of the package works without it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deepedge.core.errors import DependencyUnavailableError
from deepedge.planning.placement.instance import FloatArray, IntArray, PlacementInstance
from deepedge.planning.placement.model import SolverReport, SolveStatus, relative_gap
from deepedge.planning.placement.solution import Assignment, evaluate

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MilpModel:
    """Column blocks and the sparse row-wise model handed to HiGHS."""

    n_x: int
    n_p: int
    n_q: int
    n_e: int
    n_w: int
    c_q: IntArray  # (d, e) index of each candidate
    w_q: IntArray  # (d, e) index of each w column
    w_p: IntArray  # pair of each w column
    smax: FloatArray
    cost: FloatArray
    col_lo: FloatArray
    col_hi: FloatArray
    integer: np.ndarray
    matrix: csr_matrix
    row_lo: FloatArray
    row_hi: FloatArray

    @property
    def off_n(self) -> int:
        return self.n_x

    @property
    def off_q(self) -> int:
        return self.n_x + self.n_p

    @property
    def off_s(self) -> int:
        return self.n_x + self.n_p + self.n_q

    @property
    def off_z(self) -> int:
        return self.off_s + self.n_e

    @property
    def off_w(self) -> int:
        return self.off_z + self.n_e


@dataclass(frozen=True)
class MilpResult:
    status: SolveStatus
    assignment: Assignment | None
    objective: float | None
    bound: float | None
    report: SolverReport


class _Rows:
    """Accumulates row blocks as (row, col, value) triplets."""

    def __init__(self) -> None:
        self.r: list[IntArray] = []
        self.c: list[IntArray] = []
        self.v: list[FloatArray] = []
        self.lo: list[FloatArray] = []
        self.hi: list[FloatArray] = []
        self.count = 0

    def block(self, n_rows: int, rows: Any, cols: Any, vals: Any, lo: Any, hi: Any) -> None:
        self.r.append(np.asarray(rows, dtype=np.int64) + self.count)
        self.c.append(np.asarray(cols, dtype=np.int64))
        self.v.append(np.asarray(vals, dtype=np.float64))
        self.lo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (n_rows,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (n_rows,)))
        self.count += n_rows


STRONG_LIMIT = 150_000  # most (d, e, p) columns for which rows [12] are added
PRESOLVE_LIMIT = 200_000  # most columns for which HiGHS's presolve runs by default


def strong_size(inst: PlacementInstance) -> int:
    """Number of w columns rows [12] would add."""
    q_nodes = np.unique(inst.c_demand * inst.n_nodes + inst.c_node) % inst.n_nodes
    per_node = np.bincount(inst.p_node, minlength=inst.n_nodes)
    return int(per_node[q_nodes].sum())


def build(inst: PlacementInstance, strong: bool | None = None) -> MilpModel:
    """Build the MILP of the module docstring, block by block."""
    if strong is None:
        strong = strong_size(inst) <= STRONG_LIMIT
    n_x, n_p, n_e = inst.c_demand.size, inst.p_node.size, inst.n_nodes
    cd, cg, ce, cp = inst.c_demand, inst.c_variant, inst.c_node, inst.c_pair
    de_key = cd * n_e + ce
    q_keys, c_q = np.unique(de_key, return_inverse=True)
    c_q = c_q.reshape(-1)
    n_q = q_keys.size
    q_d, q_e = q_keys // n_e, q_keys % n_e
    pg, pe = inst.p_variant, inst.p_node
    p_al = inst.g_alpha[pg] * inst.lat[pg, pe]
    p_nmax = inst.nmax[pg, pe].astype(np.float64)
    p_load = inst.load[pg, pe]
    p_mem = inst.g_mem[pg]
    smax_sum = np.bincount(pe, weights=p_al * p_nmax, minlength=n_e)
    smax_k = np.zeros(n_e)
    np.maximum.at(smax_k, pe, p_al * inst.k_max)
    smax_slack = np.zeros(n_e)
    np.maximum.at(smax_slack, ce, inst.c_slack)
    smax = np.minimum(np.minimum(smax_sum, smax_k), smax_slack)
    off_n, off_q = n_x, n_x + n_p
    off_s, off_z = off_q + n_q, off_q + n_q + n_e
    off_w = off_z + n_e
    if strong:
        # every (q, p) with p on q's node: w columns, sorted by q
        pairs_by_node = [np.flatnonzero(pe == e) for e in range(n_e)]
        w_q = np.concatenate([np.full(pairs_by_node[e].size, k) for k, e in enumerate(q_e)])
        w_p = np.concatenate([pairs_by_node[e] for e in q_e])
    else:
        w_q = w_p = np.zeros(0, dtype=np.int64)
    n_w = int(w_q.size)
    n_col = off_w + n_w
    weight = inst.alpha / inst.total_rate
    cost = np.zeros(n_col)
    cost[:n_x] = weight * inst.d_rate[cd] * inst.c_base
    cost[off_q:off_s] = weight * inst.d_rate[q_d]
    cost[off_z:off_w] = (1 - inst.alpha) / n_e
    col_lo = np.zeros(n_col)
    col_hi = np.full(n_col, np.inf)
    col_hi[:n_x] = 1.0
    col_hi[off_n:off_q] = p_nmax
    col_hi[off_q:off_s] = smax[q_e]
    col_hi[off_s:off_z] = smax
    integer = np.zeros(n_col, dtype=bool)
    integer[:off_q] = True

    rows, xs, inf = _Rows(), np.arange(n_x), np.inf
    # [1] (13) one route per demand
    rows.block(inst.n_demands, cd, xs, np.ones(n_x), 1.0, 1.0)
    # [2] (4) latency limit, only where some candidate could exceed it
    q_min_slack = np.full(n_q, np.inf)
    np.minimum.at(q_min_slack, c_q, inst.c_slack)
    need = np.flatnonzero(q_min_slack < smax[q_e] - 1e-9)
    row_of = np.full(n_q, -1)
    row_of[need] = np.arange(need.size)
    sel = row_of[c_q] >= 0
    rows.block(
        need.size,
        np.concatenate([row_of[c_q[sel]], np.arange(need.size)]),
        np.concatenate([xs[sel], off_q + need]),
        np.concatenate([inst.c_base[sel], np.ones(need.size)]),
        -inf,
        inst.d_lmax[q_d[need]],
    )
    # [3] McCormick: q - S - Smax * y >= -Smax
    qs = np.arange(n_q)
    rows.block(
        n_q,
        np.concatenate([qs, qs, c_q]),
        np.concatenate([off_q + qs, off_s + q_e, xs]),
        np.concatenate([np.ones(n_q), -np.ones(n_q), -smax[q_e[c_q]]]),
        -smax[q_e],
        inf,
    )
    # [4] q >= sum alpha L x
    rows.block(
        n_q,
        np.concatenate([qs, c_q]),
        np.concatenate([off_q + qs, xs]),
        np.concatenate([np.ones(n_q), -inst.g_alpha[cg] * inst.lat[cg, ce]]),
        0.0,
        inf,
    )
    ps = np.arange(n_p)
    # [5] (9) load
    rows.block(
        n_p,
        np.concatenate([cp, ps]),
        np.concatenate([xs, off_n + ps]),
        np.concatenate([inst.d_rate[cd], -p_load]),
        -inf,
        0.0,
    )
    # [6] (10) x <= n
    rows.block(
        n_x, np.concatenate([xs, xs]), np.concatenate([xs, off_n + cp]),
        np.concatenate([np.ones(n_x), -np.ones(n_x)]), -inf, 0.0,
    )  # fmt: skip
    # [7] n <= nmax * sum x
    rows.block(
        n_p, np.concatenate([ps, cp]), np.concatenate([off_n + ps, xs]),
        np.concatenate([np.ones(n_p), -p_nmax[cp]]), -inf, 0.0,
    )  # fmt: skip
    # [8] (11) at most K instances per node
    rows.block(n_e, pe, off_n + ps, np.ones(n_p), -inf, float(inst.k_max))
    # [9] (12) memory
    rows.block(n_e, pe, off_n + ps, p_mem, -inf, inst.node_mem)
    # [10] S_e definition
    es = np.arange(n_e)
    rows.block(
        n_e, np.concatenate([es, pe]), np.concatenate([off_s + es, off_n + ps]),
        np.concatenate([np.ones(n_e), -p_al]), 0.0, 0.0,
    )  # fmt: skip
    # [11] (7)-(8) tangent cuts of the utilisation cost
    for a_k, b_k in inst.cost_lines:
        rows.block(
            n_e,
            np.concatenate([es, pe]),
            np.concatenate([off_z + es, off_n + ps]),
            np.concatenate([np.ones(n_e), -b_k * p_mem / inst.node_mem[pe]]),
            a_k,
            inf,
        )
    if n_w:
        # [12] q - sum_p w >= 0;  w - alpha L n_p - alpha L nmax_p y >= -alpha L nmax_p
        ws = np.arange(n_w)
        rows.block(
            n_q, np.concatenate([qs, w_q]), np.concatenate([off_q + qs, off_w + ws]),
            np.concatenate([np.ones(n_q), -np.ones(n_w)]), 0.0, inf,
        )  # fmt: skip
        # y_de = sum of x over the candidates of (d, e): expand per w row
        order = np.argsort(c_q, kind="stable")
        q_start = np.searchsorted(c_q[order], np.arange(n_q + 1))
        cnt = np.diff(q_start)[w_q]
        w_rep = np.repeat(ws, cnt)
        x_of = order[np.concatenate([np.arange(q_start[q], q_start[q + 1]) for q in w_q])]
        big = p_al[w_p] * p_nmax[w_p]
        rows.block(
            n_w,
            np.concatenate([ws, ws, w_rep]),
            np.concatenate([off_w + ws, off_n + w_p, x_of]),
            np.concatenate([np.ones(n_w), -p_al[w_p], -big[w_rep]]),
            -big,
            inf,
        )
    from scipy.sparse import csr_matrix  # imported when a model is built, not at start-up

    matrix = csr_matrix(
        (np.concatenate(rows.v), (np.concatenate(rows.r), np.concatenate(rows.c))),
        shape=(rows.count, n_col),
    )
    matrix.sum_duplicates()
    return MilpModel(
        n_x, n_p, n_q, n_e, n_w, c_q, w_q, w_p, smax, cost, col_lo, col_hi, integer, matrix,
        np.concatenate(rows.lo), np.concatenate(rows.hi),
    )  # fmt: skip


def start_vector(inst: PlacementInstance, model: MilpModel, a: Assignment) -> FloatArray:
    """A full column vector for a warm start from an assignment."""
    fig = evaluate(inst, a)
    col = np.zeros(model.off_w + model.n_w)
    col[a.choice] = 1.0
    col[model.off_n : model.off_q] = a.instances
    col[model.off_q + model.c_q[a.choice]] = fig.interference_ms[inst.c_node[a.choice]]
    col[model.off_s : model.off_z] = fig.interference_ms
    mem = np.bincount(inst.p_node, weights=inst.g_mem[inst.p_variant] * a.instances,
                      minlength=inst.n_nodes)  # fmt: skip
    col[model.off_z : model.off_w] = [inst.node_cost(float(u)) for u in mem / inst.node_mem]
    if model.n_w:
        y = np.zeros(model.n_q)
        y[model.c_q[a.choice]] = 1.0
        pg, pe = inst.p_variant[model.w_p], inst.p_node[model.w_p]
        col[model.off_w :] = (
            y[model.w_q] * inst.g_alpha[pg] * inst.lat[pg, pe] * a.instances[model.w_p]
        )
    return col


def _highs() -> Any:
    try:
        import highspy
    except ImportError as exc:  # pragma: no cover - highspy is a declared dependency
        raise DependencyUnavailableError("the MILP needs highspy (HiGHS)") from exc
    return highspy


def quiet_solver(hs: Any) -> Any:
    """A HiGHS instance that writes nothing to the process's stdout.

    highspy's ``Highs.__init__`` enables its callbacks right after the C++ constructor,
    and that logs the "Running HiGHS ..." banner to file descriptor 1 before any option
    can be set (once per process), which broke ``deepedge plan place``'s JSON. The core
    class it wraps is constructed silently, so ``output_flag`` is off before any call that
    logs; the callback machinery is not used here.
    """
    core = getattr(getattr(hs, "_core", None), "_Highs", None)
    h = core() if core is not None else hs.Highs()
    h.setOptionValue("output_flag", False)
    return h


def solve(
    inst: PlacementInstance,
    *,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-4,
    warm_start: Assignment | None = None,
    relax: bool = False,
    threads: int | None = None,
    strong: bool | None = False,
    presolve: bool | None = None,
) -> MilpResult:
    """Solve the model (or its LP relaxation) and decode the best solution HiGHS found.

    Status comes from the solver's own bound and gap, not from its status word: a run is
    ``OPTIMAL`` only when HiGHS says so *and* its gap is within ``mip_rel_gap``. ``strong``
    adds rows [12] (None: below the size limit); they tighten the LP but slow the MILP.
    ``presolve`` None: on below ``PRESOLVE_LIMIT`` columns, off above, and with it the
    feasibility-jump heuristic. Neither phase of HiGHS 1.15 polls the time limit: on the
    700k-column scale model presolve alone ran 92 s against a 20 s limit, and feasibility
    jump kept a 300 s run going for more than 10 minutes, so above that size both are
    switched off and the limit holds in wall time.
    """
    hs = _highs()
    model = build(inst, strong)
    h = quiet_solver(hs)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("random_seed", 0)
    if threads is not None:
        # HiGHS keeps one global thread pool per process; once a run has started it with
        # another size, a run asking for ``threads`` fails at once ("Not Set", HiGHS 1.16)
        # unless the pool is reset first
        reset = getattr(type(h), "resetGlobalScheduler", None)
        if reset is not None:
            reset(True)
        h.setOptionValue("threads", int(threads))
    if presolve is None:
        presolve = model.cost.size <= PRESOLVE_LIMIT
    h.setOptionValue("presolve", "on" if presolve else "off")
    if not presolve:
        h.setOptionValue("mip_heuristic_run_feasibility_jump", False)
    lp = hs.HighsLp()
    lp.num_col_ = int(model.cost.size)
    lp.num_row_ = int(model.row_lo.size)
    lp.col_cost_ = model.cost
    lp.col_lower_ = model.col_lo
    lp.col_upper_ = model.col_hi
    lp.row_lower_ = model.row_lo
    lp.row_upper_ = model.row_hi
    lp.a_matrix_.format_ = hs.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = model.matrix.indptr.astype(np.int32)
    lp.a_matrix_.index_ = model.matrix.indices.astype(np.int32)
    lp.a_matrix_.value_ = model.matrix.data
    lp.a_matrix_.num_col_ = lp.num_col_
    lp.a_matrix_.num_row_ = lp.num_row_
    if not relax:
        kinds = [hs.HighsVarType.kContinuous, hs.HighsVarType.kInteger]
        lp.integrality_ = [kinds[int(b)] for b in model.integer]
    h.passModel(lp)
    warm = False
    if warm_start is not None and not relax:
        sol = hs.HighsSolution()
        sol.col_value = start_vector(inst, model, warm_start)
        sol.value_valid = True
        warm = h.setSolution(sol) == hs.HighsStatus.kOk
    if warm:
        # with a good incumbent the sub-MIP heuristics cost more than they find here;
        # the time is better spent on the bound
        for name in ("mip_heuristic_run_rins", "mip_heuristic_run_rens",
                     "mip_heuristic_run_root_reduced_cost"):  # fmt: skip
            h.setOptionValue(name, False)
        h.setOptionValue("mip_heuristic_effort", 0.0)
    h.run()
    status_word = h.modelStatusToString(h.getModelStatus())
    info = h.getInfo()
    ms = h.getModelStatus()
    mstat = hs.HighsModelStatus
    has_point = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    report = SolverReport(
        name=f"HiGHS {h.version()}" + (" (LP relaxation)" if relax else ""),
        model_status=status_word,
        time_s=float(h.getRunTime()),
        time_limit_s=float(time_limit_s),
        mip_rel_gap=None if relax else float(mip_rel_gap),
        mip_nodes=None if relax else int(info.mip_node_count),
        columns=int(model.cost.size),
        rows=int(model.row_lo.size),
        warm_started=warm,
    )
    if ms in (mstat.kInfeasible, mstat.kUnboundedOrInfeasible):
        return MilpResult(SolveStatus.INFEASIBLE, None, None, None, report)
    if relax:
        ok = ms == mstat.kOptimal
        obj = float(info.objective_function_value) if ok else None
        return MilpResult(SolveStatus.OPTIMAL if ok else SolveStatus.NO_SOLUTION, None, obj,
                          obj, report)  # fmt: skip
    bound = float(info.mip_dual_bound)
    bound_or_none = bound if np.isfinite(bound) else None
    if not has_point:
        return MilpResult(SolveStatus.NO_SOLUTION, None, None, bound_or_none, report)
    col = np.asarray(h.getSolution().col_value)
    assignment = decode(inst, model, col)
    objective = evaluate(inst, assignment).objective
    gap = relative_gap(objective, bound) if bound_or_none is not None else None
    proven = ms == mstat.kOptimal and gap is not None and gap <= mip_rel_gap + 1e-9
    log.debug("HiGHS %s obj=%.6g bound=%s gap=%s", status_word, objective, bound_or_none, gap)
    status = SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE
    return MilpResult(status, assignment, objective, bound_or_none, report)


def decode(inst: PlacementInstance, model: MilpModel, col: FloatArray) -> Assignment:
    """Routes from the largest ``x`` of each demand; instances rounded from ``n``."""
    x = col[: model.n_x]
    order = np.lexsort((-x, inst.c_demand))
    starts = np.searchsorted(inst.c_demand[order], np.arange(inst.n_demands))
    choice = order[starts].astype(np.int64)
    instances = np.rint(col[model.off_n : model.off_q]).astype(np.int64)
    return Assignment(choice=choice, instances=instances)
