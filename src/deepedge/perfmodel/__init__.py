"""Performance and interference estimators behind one Protocol (Deep-Edge, Section IV-C1).

The constant below is shared by the CLI and the benchmarks without importing the fitting
code (pandas, FLAML) at start-up; so are the fit budgets of
:mod:`deepedge.perfmodel.fit_budget`.
"""

MODELS_SUBDIR = "models"  # where a profile directory keeps its fitted models
