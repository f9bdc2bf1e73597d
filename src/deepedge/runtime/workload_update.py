"""One model update of a user's workload outside the demo (``deepedge update``).

:func:`update_workload` takes a checked :class:`~deepedge.workload.resolve.Workload` and a
cluster and runs one distributed update (:func:`~deepedge.runtime.update.run_model_update`):

1. **Data.** Window ``t`` of the workload's data (default: its last window, or window 0 of
   an unbounded stream) is read from disk and labelled by the workload's labeller (or its
   own labels); a seeded ``validation_fraction`` of it validates, the rest trains.
2. **Plan and train.** The cluster's ``dataset_size`` becomes the training size; Deep-Edge
   plans on estimates and the asynchronous parameter server trains the workload's model
   from ``initial_weights`` (default: the factory's), its frozen layers untouched; the
   validation split is scored with the workload's metric, which the stop rule and the
   choice of the best epoch read.
3. **Score.** The window's held-out images score the model before and after, with the
   workload's metric, against their true labels (the labeller's where the data has none).

The result carries the full flat weights of the updated model (frozen parts included) and
the scores; :func:`save_update` writes them (``weights.npy``, ``model.pt``,
``update.json``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import get_flat_weights, set_flat_weights
from deepedge.learning.training import metric_score
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.live_cluster import LiveCluster, live_planner
from deepedge.runtime.monitor import UpdateEvent
from deepedge.runtime.testbed import deep_edge_planner
from deepedge.runtime.update import UpdateConfig, UpdateResult, run_model_update
from deepedge.workload.resolve import Workload
from deepedge.workload.sources import NO_LABEL


@dataclass(frozen=True)
class WorkloadUpdate:
    window: int
    train_size: int
    validation_size: int
    metric_before: float  # held-out images of the window, the workload's metric
    metric_after: float
    weights: np.ndarray  # full flat weights of the updated model
    result: UpdateResult

    def summary(self, workload: Workload) -> dict[str, Any]:
        r = self.result
        return {
            "workload": workload.spec.name,
            "window": self.window,
            "train_size": self.train_size,
            "validation_size": self.validation_size,
            "parameters": workload.parameters,
            "trainable_parameters": workload.trainable,
            "frozen": list(workload.frozen_names),
            "metric": workload.spec.metric.value,
            "metric_before": self.metric_before,
            "metric_after": self.metric_after,
            "validation_accuracies": list(r.accuracies),
            "best_epoch": r.best_epoch,
            "stop_reason": r.stop_reason.value,
            "restarts": r.restarts,
            "excluded": list(r.excluded),
            "plan": r.plan.model_dump(mode="json"),
            "emulated": r.emulated,
        }


def score(workload: Workload, weights: np.ndarray, images: np.ndarray, labels: np.ndarray) -> float:
    """The workload's metric of the full flat ``weights`` on ``(images, labels)``."""
    if len(labels) == 0:
        raise InvalidInputError("nothing to score: the window holds out no image", field="window")
    model = workload.model_factory()
    set_flat_weights(model, weights)
    return metric_score(model, images, labels, workload.spec.metric)


def default_window(workload: Workload) -> int:
    n = workload.source.n_windows
    return 0 if n is None else n - 1


def update_workload(
    workload: Workload,
    cluster: ClusterSpec | None,
    checkpoint_dir: Path,
    *,
    window: int | None = None,
    initial_weights: np.ndarray | None = None,
    config: UpdateConfig | None = None,
    validation_fraction: float = 0.2,
    estimate_noise: float = 0.05,
    on_event: Callable[[UpdateEvent], None] | None = None,
    resume: bool = False,
    live: LiveCluster | None = None,
    models_root: Path | None = None,
) -> WorkloadUpdate:
    """Run one update of ``workload`` on ``cluster`` (module docstring); ``resume``
    continues from a checkpoint in ``checkpoint_dir`` (a restarted job).

    With ``live`` (a real cluster with agents) the cluster comes from the agents' reports
    when ``cluster`` is None, the plan from :func:`live_planner` (learned models of
    ``models_root`` per device type, else the catalog), and nothing is paced."""
    if cluster is None and live is None:
        raise InvalidInputError("give a cluster, or a live cluster with agents", "cluster")
    config = replace(config or UpdateConfig(seed=workload.spec.seed), metric=workload.spec.metric)
    t = default_window(workload) if window is None else window
    data = workload.window(t)
    labels = workload.label(data.images, data.labels)
    if len(labels) < 4:
        raise InvalidInputError(f"window {t} holds {len(labels)} images: too few", field="window")
    order = np.random.default_rng([workload.spec.seed, t]).permutation(len(labels))
    n_val = min(len(labels) - 2, max(1, round(validation_fraction * len(labels))))
    val, train = order[:n_val], order[n_val:]
    weights = (
        get_flat_weights(workload.model_factory()) if initial_weights is None else initial_weights
    )
    eval_labels = data.eval_labels
    if (eval_labels == NO_LABEL).any():
        eval_labels = workload.label(data.eval_images, eval_labels)
    before = score(workload, weights, data.eval_images, eval_labels)
    spec = live.spec(len(train)) if cluster is None and live is not None else cluster
    assert spec is not None
    result = run_model_update(
        spec.model_copy(update={"dataset_size": len(train)}),
        (data.images[train], labels[train]),
        (data.images[val], labels[val]),
        workload.model_factory,
        weights,
        checkpoint_dir,
        planner=(
            deep_edge_planner(estimate_noise, workload.spec.seed)
            if live is None
            else live_planner(models_root)
        ),
        config=config,
        resume=resume,
        on_event=on_event,
        live=live,
    )
    return WorkloadUpdate(
        window=t,
        train_size=len(train),
        validation_size=len(val),
        metric_before=before,
        metric_after=score(workload, result.weights, data.eval_images, eval_labels),
        weights=result.weights,
        result=result,
    )


def save_update(update: WorkloadUpdate, workload: Workload, output: Path) -> dict[str, Any]:
    """``weights.npy`` (full flat), ``model.pt`` (state dict) and ``update.json``."""
    output.mkdir(parents=True, exist_ok=True)
    np.save(output / "weights.npy", update.weights)
    model = workload.model_factory()
    set_flat_weights(model, update.weights)
    torch.save(model.state_dict(), output / "model.pt")
    summary = update.summary(workload)
    (output / "update.json").write_text(json.dumps(summary, indent=2))
    return summary
