"""A fit's budget: counted in trials or in seconds, and what it refuses."""

from __future__ import annotations

import math

import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.fit_budget import DEFAULT_FIT, QUICK_FIT, FitBudget


@pytest.mark.parametrize(
    ("time_s", "trials", "field"),
    [
        (0.0, None, "time_s"),
        (-1.0, 8, "time_s"),
        (math.nan, None, "time_s"),
        (math.inf, 8, "time_s"),
        (10.0, 0, "trials"),
    ],
)
def test_bad_budgets_are_refused(time_s, trials, field):
    with pytest.raises(InvalidInputError) as caught:
        FitBudget(time_s, trials)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("budget", "described"),
    [(FitBudget(20.0), "20 s"), (FitBudget(0.5), "0.5 s"), (FitBudget(60.0, 12), "12 trials")],
)
def test_describe_names_what_counts(budget, described):
    assert budget.describe() == described


def test_the_quick_fit_counts_trials_and_the_default_seconds():
    assert QUICK_FIT.trials is not None and QUICK_FIT.trials % 4 == 0  # whole rounds of learners
    assert DEFAULT_FIT.trials is None and DEFAULT_FIT.time_s == 20.0  # the benchmark's search
