"""How much the golden-labelled samples say: accuracy with its interval, and two versions
compared on the same samples.

Every decision of the control loop (gate, canary verdict, automatic rollback, drift
trigger, a kept version brought back) compares accuracies measured on a sample of live
traffic. On 19 samples the standard error of an accuracy near 0.2 is about 0.09: a
point-estimate comparison is a coin flip. So each decision is made on these figures and
states them.

**One version.** ``k`` of ``n`` samples right: accuracy ``k/n`` with the Wilson score
interval at confidence ``1 - alpha``.

**Two versions on the same samples** (paired: the serving version's answers and another
version's own predictions, in the shadow, on the same requests). With the 2x2 table
``e`` both right, ``f`` only A right, ``g`` only B right, ``h`` both wrong (``n`` in all):

* the difference ``d = acc_A - acc_B = (f - g) / n``;
* its interval by Newcombe's hybrid score method for paired proportions (his method 10,
  Stat. Med. 1998): Wilson intervals ``(l1, u1)`` of ``acc_A`` and ``(l2, u2)`` of ``acc_B``
  combined with the correlation ``phi`` of the two versions' correctness (continuity
  corrected), ``d - sqrt((p1-l1)^2 - 2 phi (p1-l1)(u2-p2) + (u2-p2)^2)`` to
  ``d + sqrt((u1-p1)^2 - 2 phi (u1-p1)(p2-l2) + (p2-l2)^2)``; it stays wide while ``n`` is
  small even when the versions never disagree;
* McNemar's exact test of ``f`` against ``Binomial(f + g, 1/2)`` (two-sided ``p``).

A decision needs ``n >= min_samples`` and an interval that clears its margin; otherwise it
is *undecided*, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


def _z(confidence: float) -> float:
    from scipy.stats import norm  # (scipy.stats takes half a second to import: when used)

    return float(norm.ppf(0.5 + confidence / 2))


def wilson(successes: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion (``(0, 1)`` without samples)."""
    if n <= 0:
        return 0.0, 1.0
    z, p = _z(confidence), successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Accuracy:
    """One version's accuracy on ``n`` samples, with its interval."""

    n: int
    right: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.right / self.n if self.n else math.nan

    def text(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] on n={self.n}"

    def document(self) -> dict[str, Any]:
        return {"n": self.n, "accuracy": _round(self.value), "low": _round(self.low),
                "high": _round(self.high)}  # fmt: skip


def accuracy(correct: np.ndarray, confidence: float) -> Accuracy:
    right, n = int(np.count_nonzero(correct)), len(correct)
    return Accuracy(n, right, *wilson(right, n, confidence))


@dataclass(frozen=True)
class PairedComparison:
    """Version A against version B on the same ``n`` samples (module text)."""

    both: int  # e: both right
    a_only: int  # f
    b_only: int  # g
    neither: int  # h
    low: float  # of acc_A - acc_B
    high: float
    p_value: float  # McNemar's exact test
    confidence: float

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    @property
    def a_accuracy(self) -> float:
        return (self.both + self.a_only) / self.n if self.n else math.nan

    @property
    def b_accuracy(self) -> float:
        return (self.both + self.b_only) / self.n if self.n else math.nan

    @property
    def diff(self) -> float:
        return (self.a_only - self.b_only) / self.n if self.n else 0.0

    def __add__(self, other: PairedComparison) -> PairedComparison:
        """The evidence of both (disjoint samples of the same two versions)."""
        return paired_from_counts(self.both + other.both, self.a_only + other.a_only,
                                  self.b_only + other.b_only, self.neither + other.neither,
                                  self.confidence)  # fmt: skip

    def text(self) -> str:
        return (f"n={self.n}, {self.a_accuracy:.3f} vs {self.b_accuracy:.3f}, difference "
                f"{self.diff:+.3f} [{self.low:+.3f}, {self.high:+.3f}] at "
                f"{self.confidence:.0%}, p={self.p_value:.3g}")  # fmt: skip

    def document(self) -> dict[str, Any]:
        return {"n": self.n, "a_accuracy": _round(self.a_accuracy),
                "b_accuracy": _round(self.b_accuracy), "diff": _round(self.diff),
                "low": _round(self.low), "high": _round(self.high),
                "p_value": _round(self.p_value), "confidence": self.confidence,
                "table": [self.both, self.a_only, self.b_only, self.neither]}  # fmt: skip


def paired_from_counts(e: int, f: int, g: int, h: int, confidence: float) -> PairedComparison:
    n = e + f + g + h
    if n == 0:
        return PairedComparison(0, 0, 0, 0, -1.0, 1.0, 1.0, confidence)
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = wilson(e + f, n, confidence)
    l2, u2 = wilson(e + g, n, confidence)
    phi = _phi(e, f, g, h)
    d = p1 - p2
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    low, high = d - math.sqrt(max(below, 0.0)), d + math.sqrt(max(above, 0.0))
    m = f + g
    from scipy.stats import binom

    p_value = 1.0 if m == 0 else min(1.0, 2.0 * float(binom.cdf(min(f, g), m, 0.5)))
    return PairedComparison(e, f, g, h, max(-1.0, low), min(1.0, high), p_value, confidence)


def _phi(e: int, f: int, g: int, h: int) -> float:
    """The correlation of the two versions' correctness, continuity corrected as Newcombe
    does (towards zero by ``n/2`` in the numerator)."""
    n = e + f + g + h
    denominator = (e + f) * (g + h) * (e + g) * (f + h)
    if denominator == 0:
        return 0.0
    cross = float(e * h - f * g)
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    return cross / math.sqrt(denominator)


def compare_paired(a_right: np.ndarray, b_right: np.ndarray, confidence: float) -> PairedComparison:
    """Version A's correctness against B's on the same samples (boolean arrays)."""
    a, b = np.asarray(a_right, dtype=bool), np.asarray(b_right, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in number: {a.shape} and {b.shape}")
    return paired_from_counts(int(np.count_nonzero(a & b)), int(np.count_nonzero(a & ~b)),
                              int(np.count_nonzero(~a & b)), int(np.count_nonzero(~a & ~b)),
                              confidence)  # fmt: skip


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 6)
