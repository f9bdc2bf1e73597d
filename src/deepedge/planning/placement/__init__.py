"""MVSP: model-variant selection, placement and request routing (the exact MILP, the
heuristic with local and large-neighbourhood search, the Lagrangian bound, the checker)."""
