"""One model update of a user's workload outside the demo (``deepedge update``).

:func:`update_workload` takes a checked :class:`~deepedge.workload.resolve.Workload` and a
cluster and runs one distributed update
(:func:`~deepedge.runtime.training.update.run_model_update`):

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

The result carries the whole updated model (its full flat weights, frozen parts included,
and its buffers: BatchNorm's running statistics) and the scores; :func:`save_update`
writes ``model.pt`` in the format the workload's model came in (a ``state_dict`` for an
entry point, a TorchScript archive for a TorchScript model; it loads back with
``torch.load`` or ``torch.jit.load`` and answers like the model that was scored) and
``update.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.convergence import (
    StoppingRule,
    chance_threshold,
    constant_guess_accuracy,
)
from deepedge.learning.model_state import (
    State,
    buffer_arrays,
    load_buffers,
    same_outputs,
    save_model_file,
)
from deepedge.learning.models import get_flat_weights, set_flat_weights
from deepedge.learning.objective import MetricKind
from deepedge.learning.training import metric_score
from deepedge.planning.sharding.spec import ClusterSpec
from deepedge.runtime.training.monitor import UpdateEvent
from deepedge.runtime.training.testbed import deep_edge_planner
from deepedge.runtime.training.update import UpdateConfig, UpdateResult, run_model_update
from deepedge.runtime.training.update_config import NormStatistics
from deepedge.workload.resolve import Workload
from deepedge.workload.samples import BadSample, describe
from deepedge.workload.sources import NO_LABEL

if TYPE_CHECKING:  # the live cluster's module imports Ray; an update on threads never does
    from deepedge.runtime.cluster.live_cluster import LiveCluster


@dataclass(frozen=True)
class WorkloadUpdate:
    window: int
    train_size: int
    validation_size: int
    metric_before: float  # held-out images of the window, the workload's metric
    metric_after: float
    weights: np.ndarray  # full flat weights of the updated model
    result: UpdateResult
    buffers: State = field(default_factory=dict)  # its buffers (running statistics)
    skipped: tuple[BadSample, ...] = ()  # samples of the window left out as bad
    chance: float | None = None  # what learning nothing scores here (None: 1 / classes)

    def model(self, workload: Workload) -> nn.Module:
        """The updated model, whole (weights and buffers), in evaluation mode."""
        model = workload.model_factory()
        set_flat_weights(model, self.weights)
        load_buffers(model, self.buffers)
        return model.eval()

    def summary(self, workload: Workload) -> dict[str, Any]:
        r = self.result
        chance = self.chance if self.chance is not None else 1.0 / max(1, workload.n_classes)
        at_chance = bool(r.accuracies) and max(r.accuracies) <= chance_threshold(
            chance, workload.spec.training.stop.chance_margin, self.validation_size
        )
        warnings = list(workload.warnings)
        if at_chance:
            warnings.append(
                f"training: the best validation accuracy {max(r.accuracies):.3f} is at chance "
                f"({chance:.3f}: 1 / classes, or the most frequent class's share of the "
                "validation labels): the model learned nothing; raise training.max_epochs or "
                "check training.lr and the labels"
            )
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
            "buffers": len(self.buffers),
            "skipped_samples": len(self.skipped),
            "skipped": describe(self.skipped),
            "warnings": warnings,
        }


def score(
    workload: Workload,
    weights: np.ndarray,
    images: np.ndarray,
    labels: np.ndarray,
    buffers: State | None = None,
) -> float:
    """The workload's metric of the model with the full flat ``weights`` and ``buffers``
    (default: the factory's) on ``(images, labels)``."""
    if len(labels) == 0:
        raise InvalidInputError("nothing to score: the window holds out no image", field="window")
    model = workload.model_factory()
    set_flat_weights(model, weights)
    if buffers:
        load_buffers(model, buffers)
    return metric_score(model, images, labels, workload.spec.metric)


def training_config(
    workload: Workload,
    *,
    max_epochs: int | None = None,
    time_scale: float = 0.0,
    seed: int | None = None,
) -> UpdateConfig:
    """The update's knobs from the workload's ``training`` section: the optimizer and its
    learning rate, momentum and weight decay (SGD's the synchronous pair the PS
    compensates for asynchrony), the stop rule (``max_epochs`` at most ``max_epochs`` when
    given; no convergence at chance, ``1 / classes``) and where BatchNorm's statistics
    come from."""
    training = workload.spec.training
    stop = training.stop
    epochs = training.max_epochs if max_epochs is None else min(max_epochs, training.max_epochs)
    return UpdateConfig(
        stopping=StoppingRule(
            min_epochs=stop.min_epochs,
            max_epochs=epochs,
            horizon_epochs=stop.horizon_epochs,
            min_gain=stop.min_gain,
            target_accuracy=stop.target_accuracy,
            rule=stop.rule,
            chance_accuracy=1.0 / max(1, workload.n_classes),
            chance_margin=stop.chance_margin,
        ),
        lr=training.learning_rate,
        momentum=training.momentum,
        optimizer=training.optimizer.value,
        weight_decay=training.weight_decay,
        norm_statistics=NormStatistics(training.norm_statistics),
        metric=workload.spec.metric,
        time_scale=time_scale,
        seed=workload.spec.seed if seed is None else seed,
    )


def batch_limited(cluster: ClusterSpec, workload: Workload) -> ClusterSpec:
    """``cluster`` with every worker's batch bounds inside the training section's."""
    training = workload.spec.training
    if training.min_batch is None and training.max_batch is None:
        return cluster
    workers = []
    for w in cluster.workers:
        low = max(w.min_batch, training.min_batch or 1)
        high = min(w.max_batch, training.max_batch or w.max_batch)
        if high < low:
            raise InvalidInputError(
                f"training: batch bounds [{training.min_batch}, {training.max_batch}] leave "
                f"worker {w.id} ([{w.min_batch}, {w.max_batch}]) no batch size",
                field="training.max_batch",
            )
        workers.append(w.model_copy(update={"min_batch": low, "max_batch": high}))
    return cluster.model_copy(update={"workers": workers})


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
    initial_buffers: State | None = None,
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
    config = replace(config or training_config(workload), metric=workload.spec.metric)
    t = default_window(workload) if window is None else window
    data = workload.window(t)
    labels = workload.label(data.images, data.labels)
    if len(labels) < 4:
        raise InvalidInputError(f"window {t} holds {len(labels)} images: too few", field="window")
    order = np.random.default_rng([workload.spec.seed, t]).permutation(len(labels))
    n_val = min(len(labels) - 2, max(1, round(validation_fraction * len(labels))))
    val, train = order[:n_val], order[n_val:]
    chance = None
    if config.stopping.chance_accuracy is not None and config.metric is MetricKind.ACCURACY:
        # on unbalanced labels, answering the most frequent class is what learning nothing
        # scores: no convergence, and a warning, at or near it
        chance = max(config.stopping.chance_accuracy,
                     constant_guess_accuracy(labels[val], workload.n_classes))  # fmt: skip
        config = replace(config, stopping=replace(config.stopping, chance_accuracy=chance))
    start = workload.model_factory()
    weights = get_flat_weights(start) if initial_weights is None else initial_weights
    buffers = buffer_arrays(start) if initial_buffers is None else initial_buffers
    eval_labels = data.eval_labels
    if (eval_labels == NO_LABEL).any():
        eval_labels = workload.label(data.eval_images, eval_labels)
    before = score(workload, weights, data.eval_images, eval_labels, buffers)
    spec = live.spec(len(train)) if cluster is None and live is not None else cluster
    assert spec is not None
    if live is None:
        planner = deep_edge_planner(estimate_noise, workload.spec.seed)
    else:
        from deepedge.runtime.cluster.live_cluster import live_planner

        planner = live_planner(models_root)
    result = run_model_update(
        batch_limited(spec, workload).model_copy(update={"dataset_size": len(train)}),
        (data.images[train], labels[train]),
        (data.images[val], labels[val]),
        workload.model_factory,
        weights,
        checkpoint_dir,
        planner=planner,
        config=config,
        resume=resume,
        on_event=on_event,
        live=live,
        initial_buffers=buffers,
    )
    return WorkloadUpdate(
        window=t,
        train_size=len(train),
        validation_size=len(val),
        metric_before=before,
        metric_after=score(workload, result.weights, data.eval_images, eval_labels, result.buffers),
        weights=result.weights,
        result=result,
        buffers=result.buffers,
        skipped=data.skipped,
        chance=chance,
    )


MODEL_FILE = "model.pt"


def save_update(update: WorkloadUpdate, workload: Workload, output: Path) -> dict[str, Any]:
    """``model.pt`` (the whole model in the workload's format, module docstring) and
    ``update.json``; the file is read back and must answer like the model scored."""
    output.mkdir(parents=True, exist_ok=True)
    model = update.model(workload)
    kind = save_model_file(model, output / MODEL_FILE)
    summary = update.summary(workload)
    summary["model_file"] = {
        "path": str(output / MODEL_FILE),
        "format": kind.value,
        "round_trip": round_trips(workload, model, output / MODEL_FILE),
    }
    (output / "update.json").write_text(json.dumps(summary, indent=2))
    return summary


def round_trips(workload: Workload, model: nn.Module, path: Path) -> bool:
    """Whether ``path`` loads back (``torch.jit.load`` or ``torch.load`` into the factory's
    model) into a model that answers like ``model`` on a batch of the workload's input."""
    from deepedge.learning.model_state import read_model_file

    loaded = (
        torch.jit.load(str(path), map_location="cpu")
        if workload.spec.model.torchscript is not None
        else read_model_file(path, workload.model_factory)
    )
    return same_outputs(model, loaded, workload.example_batch())
