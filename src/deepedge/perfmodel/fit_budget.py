"""How much AutoML search each learned function gets (no fitting code imported here).

Counted in trials (``trials`` set), FLAML runs ``trials`` trials for each target form of a
function (its ``max_iter``), taking the learners in turn: the regressor found depends on
the data and the seed alone, however loaded the machine. ``time_s`` then only caps a
search that a stalled machine would drag out; a search it cuts short is no longer
deterministic, so it is set far above what the trials take.

Counted in seconds (``trials`` None), each function gets ``time_s``, split evenly between
its target forms, and as many trials as fit; FLAML picks each next learner by its measured
cost to improve, so a faster (or less loaded) machine searches further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class FitBudget:
    time_s: float  # seconds per function: the budget, or with ``trials`` a safety cap
    trials: int | None = None  # per target form; None: the search is counted in seconds

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_s) and self.time_s > 0):
            raise InvalidInputError(f"a fit's time must be > 0 s, got {self.time_s}", "time_s")
        if self.trials is not None and self.trials < 1:
            raise InvalidInputError(f"a fit needs at least one trial, got {self.trials}", "trials")

    def describe(self) -> str:
        return f"{self.trials} trials" if self.trials is not None else f"{self.time_s:g} s"


# A trial-counted fit's cap per function: 12 trials per form took at most 5 s per form on
# a 2-core machine at load 8 (niced), so the cap cuts only a machine stalled 10x beyond that.
TRIALS_TIME_CAP_S = 120.0
DEFAULT_FIT = FitBudget(time_s=20.0)  # the benchmark's and `perfmodels fit`'s search
QUICK_FIT = FitBudget(time_s=TRIALS_TIME_CAP_S, trials=12)  # --quick and the tests: 3 per learner
