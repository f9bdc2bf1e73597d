"""Workloads that ship with deepedge, by name (``--workload NAME``).

* ``digits`` - the edge CNN (3,818 parameters) on the drifting bundled digits, labelled by
  the stream's own labels: the zero-set-up default as a workload document.
"""

from __future__ import annotations

from typing import Any

BUNDLED: dict[str, dict[str, Any]] = {
    "digits": {
        "name": "digits",
        "model": {
            "entry_point": "deepedge.learning.models:make_edge_model",
            "kwargs": {"n_classes": 10, "image_size": 16, "width": 8},
        },
        "input": {"size": [16, 16], "channels": 1},
        "data": {"kind": "digits"},
        "labeller": {"kind": "labels-present"},
    },
}
