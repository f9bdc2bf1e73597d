"""Performance and interference estimators behind one Protocol (Deep-Edge, Section IV-C1).

The constants below are shared by the CLI and the benchmarks without importing the fitting
code (pandas, FLAML) at start-up.
"""

MODELS_SUBDIR = "models"  # where a profile directory keeps its fitted models
DEFAULT_FIT_BUDGET_S = 20.0  # AutoML search seconds per fitted function
QUICK_FIT_BUDGET_S = 1.0  # the same with --quick
