"""Workloads that ship with deepedge, by name (``--workload NAME``).

* ``digits`` - the edge CNN (3,818 parameters) on the drifting bundled digits, labelled by
  the stream's own labels: the zero-set-up default as a workload document.
* ``resnet-photos`` - a ResNet-18 (11.2 M parameters, :mod:`deepedge.learning.resnet`) on
  64x64 colour crops of scikit-image's photos under dusk, colour-cast, blur and noise drift
  (:mod:`deepedge.learning.photo_stream`), labelled by the stream's own labels: deepedge at
  the size of the papers' workloads.
* ``cancer-table`` - a tabular MLP (:func:`deepedge.learning.small_models.make_mlp`) on
  scikit-learn's breast-cancer measurements as hourly windows whose size and texture
  columns drift and where a new scanner appears (:mod:`deepedge.learning.tabular_stream`):
  30 numeric columns standardised on the first two windows, one categorical column
  one-hot, text labels (``benign``, ``malignant``), trained with Adam.
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
    "resnet-photos": {
        "name": "resnet-photos",
        "model": {
            "entry_point": "deepedge.learning.resnet:make_resnet",
            "kwargs": {"n_classes": 8, "image_size": 64},
        },
        "input": {"size": [64, 64], "channels": 3},
        "data": {
            "kind": "stream",
            "entry_point": "deepedge.learning.photo_stream:make_photo_stream",
            "kwargs": {"window_size": 256, "eval_size": 256, "image_size": 64},
        },
        "labeller": {"kind": "labels-present"},
    },
    "cancer-table": {
        "name": "cancer-table",
        "model": {
            "entry_point": "deepedge.learning.small_models:make_mlp",
            "kwargs": {"n_features": 34, "n_classes": 2, "hidden": [32, 16]},
        },
        "data": {
            "kind": "table",
            "entry_point": "deepedge.learning.tabular_stream:drifting_cancer_table",
            "label": "diagnosis",
            "timestamp": "time",
            "window_s": 3600,
            "fit_windows": 2,
        },
        "classes": ["benign", "malignant"],
        "labeller": {"kind": "labels-present"},
        "training": {"optimizer": "adam", "lr": 0.01, "batch_size": 32, "max_epochs": 20},
    },
}
