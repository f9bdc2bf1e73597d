"""The benchmarks' one percentile of measured samples (latencies, update times), with the two
ways they read one: between the order statistics (``LINEAR``) or a sample itself
(``RANK``)."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence

import numpy as np


class PercentileMethod(enum.Enum):
    """How the ``q``-th percentile of ``n`` sorted samples ``x_0 <= ... <= x_{n-1}`` is read.

    ``LINEAR``: at position ``p = q / 100 * (n - 1)``, ``x_i + (x_{i+1} - x_i) * (p - i)``
    with ``i = floor(p)`` (numpy's default method).
    ``RANK``: the sample ``x_k`` with ``k = min(floor(q / 100 * n), n - 1)``, a value that
    was measured (the load test's latency percentiles).
    """

    LINEAR = "linear"
    RANK = "rank"


def percentile(
    values: Sequence[float], q: float, method: PercentileMethod = PercentileMethod.LINEAR
) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``) of ``values`` by ``method``; nan without
    values. Raises ``ValueError`` for a ``q`` outside [0, 100]."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile lies in [0, 100], not {q}")
    if not len(values):
        return math.nan
    if method is PercentileMethod.LINEAR:
        return float(np.percentile(values, q))
    ordered = sorted(values)
    # q / 100 first, then times n: for a whole q, q / 100 is the same float as the fraction
    # written out (99 / 100 == 0.99), so the sample picked does not depend on the scale.
    return float(ordered[min(int(q / 100 * len(ordered)), len(ordered) - 1)])
