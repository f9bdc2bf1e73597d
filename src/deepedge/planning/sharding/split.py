"""The exact integer shard split of a fixed worker set and batch vector, by Total_cost.

Given the workers ``S``, their batches ``b`` (so their per-sample rates are fixed), the
cost of worker ``i`` with shard ``d_i`` is linear (Deep-Edge Section III-A)::

    cost_i(d_i) = c_i + a_i d_i
    c_i = Initialize_i
    a_i = transfer_i^ds + numEpoch * t_total_i(b)          (seconds per sample)

and the split solves::

    min_d  max_{i in S} c_i + a_i d_i
    s.t.   sum_i d_i = |M|,   d_i integer,   d_i >= l_i = b_i   (a batch never above its shard)

Continuous optimum: every ``d_i >= l_i`` forces ``T >= t_i = c_i + a_i l_i``; at any
``T >= max_i t_i`` each worker can take ``(T - c_i) / a_i >= l_i``, so::

    T* = max( max_i t_i,  (|M| + sum_i c_i / a_i) / sum_i 1 / a_i )

Integer optimum: the least ``T >= max_i t_i`` with ``sum_i floor((T - c_i) / a_i) >= |M|``;
taking ``d_i = max(l_i, floor((T* - c_i) / a_i))`` and then adding the missing units one at
a time to the worker whose cost after the unit is least reaches it (an exchange argument:
costs are increasing in ``d_i``, so the greedy order is the order of the sorted unit costs).

The split is monotone: larger rates ``a`` or larger lower bounds ``l`` never lower its
optimum, which makes it a valid bound for the oracle's branch and bound.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Split:
    cost_s: float  # max_i c_i + a_i d_i: the Total_cost of the split
    shards: IntArray  # d_i, integers summing to |M|, each >= l_i


def continuous_cost_s(
    fixed_s: FloatArray,
    rate_s: FloatArray,
    lower: FloatArray,
    total: int,
    upper: FloatArray | None = None,
) -> float:
    """``T*`` of the continuous split (``inf`` when the floors or ceilings rule out |M|).

    With ceilings ``d_i <= u_i`` a worker whose free share at the level exceeds ``u_i`` is
    held at ``u_i`` and the level is recomputed on the others; the level only rises, so a
    held worker stays held (at most ``|S|`` rounds).
    """
    if float(lower.sum()) > total or (upper is not None and float(upper.sum()) < total):
        return math.inf
    floor_s = float(np.max(fixed_s + rate_s * lower))
    inverse = 1.0 / rate_s
    free = np.ones(len(rate_s), dtype=bool)
    rest = float(total)
    held_s = -math.inf  # the dearest worker held at its ceiling
    while True:
        if not free.any():
            # every worker held: the ceilings sum to |M| (up to rounding, which is what
            # sends the last worker here when |M| is large), so each costs c_i + a_i u_i
            return max(floor_s, held_s)
        level = (rest + float(np.dot(fixed_s[free], inverse[free]))) / float(inverse[free].sum())
        if upper is None:
            return max(floor_s, level)
        over = free & ((level - fixed_s) * inverse > upper)
        if not over.any():
            return max(floor_s, held_s, level)
        held_s = max(held_s, float(np.max(fixed_s[over] + rate_s[over] * upper[over])))
        free &= ~over
        rest -= float(upper[over].sum())


def _add_units(
    fixed_s: FloatArray, rate_s: FloatArray, shards: IntArray, missing: int, upper: IntArray | None
) -> bool:
    """Give the ``missing`` cheapest next units at once when no worker needs two of them.

    True when done; False (nothing changed) when some worker's second unit would be
    cheaper than the dearest first unit taken, and the caller must add units one by one.
    """
    next_s = fixed_s + rate_s * (shards + 1)
    if upper is not None:
        next_s = np.where(shards < upper, next_s, np.inf)
    if missing > len(next_s):
        return False
    take = np.argpartition(next_s, missing - 1)[:missing]
    threshold = float(next_s[take].max())
    if not np.isfinite(threshold):
        return False
    second = fixed_s[take] + rate_s[take] * (shards[take] + 2)
    if upper is not None:
        second = np.where(shards[take] + 1 < upper[take], second, np.inf)
    if float(second.min()) < threshold:
        return False
    shards[take] += 1
    return True


def min_max_split(
    fixed_s: FloatArray,
    rate_s: FloatArray,
    lower: IntArray,
    total: int,
    upper: IntArray | None = None,
) -> Split | None:
    """The integer optimum of the split above, with optional ceilings ``d_i <= u_i``;
    None when no split meets the floors and ceilings."""
    if int(lower.sum()) > total or (upper is not None and int(upper.sum()) < total):
        return None
    ceiling = upper.astype(np.float64) if upper is not None else None
    level = continuous_cost_s(fixed_s, rate_s, lower.astype(np.float64), total, ceiling)
    shards = np.maximum(lower, np.floor((level - fixed_s) / rate_s).astype(np.int64))
    if upper is not None:
        shards = np.minimum(shards, upper)
    missing = total - int(shards.sum())
    if missing > 0 and not _add_units(fixed_s, rate_s, shards, missing, upper):
        heap = [
            (float(fixed_s[i] + rate_s[i] * (shards[i] + 1)), i)
            for i in range(len(shards))
            if upper is None or shards[i] < upper[i]
        ]
        heapq.heapify(heap)
        for _ in range(missing):
            _, i = heapq.heappop(heap)
            shards[i] += 1
            if upper is None or shards[i] < upper[i]:
                heapq.heappush(heap, (float(fixed_s[i] + rate_s[i] * (shards[i] + 1)), i))
    elif missing < 0:  # the level was a lower bound attained by some l_i: give units back
        costs = fixed_s + rate_s * shards
        for i in np.argsort(-costs, kind="stable"):
            take = min(-missing, int(shards[i] - lower[i]))
            shards[i] -= take
            missing += take
            if missing == 0:
                break
    cost = float(np.max(fixed_s + rate_s * shards))
    return Split(cost_s=cost, shards=shards)
