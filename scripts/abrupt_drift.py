"""The abrupt drift of the accuracy benchmark's digits trace, as the offline studies of a
recovery read it (``update_recipe_study.py``, ``recovery_chain_study.py``): the camera's
windows and fresh draws of them, the site's first version and golden labeller, the update's
recipe and the benchmark's offline reference (:mod:`deepedge.bench.accuracy`)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from deepedge.bench.accuracy import SCALES, digits, stream_source
from deepedge.bench.accuracy_parts import _segment_data, train_reference
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.site import Site
from deepedge.learning.training import TrainConfig, predict

ABRUPT = 1  # the trace's second segment: the abrupt drift

Window = tuple[np.ndarray, np.ndarray]


@dataclass
class AbruptDrift:
    windows: int  # the segment's windows
    window_s: float
    camera: Callable[[int], Window]  # the segment's window w as the camera sends it
    fresh: Callable[[int], Window]  # another draw of it (what the reference trains on)
    first: torch.nn.Module  # the site's first version
    recipe: TrainConfig  # the site's update recipe (SGD at its rate and momentum, a cosine)
    golden: Callable[[], torch.nn.Module]  # the golden labeller (trained on first use)
    reference: Callable[[], torch.nn.Module]  # the offline reference, trained when called


def abrupt_drift() -> AbruptDrift:
    """The abrupt drift's segment, on one thread."""
    torch.set_num_threads(1)
    settings = SCALES.full
    workload = digits(settings)
    spec = DeploymentSpec.model_validate(workload.spec)
    trace = settings.trace()
    start = trace.lead_windows + ABRUPT * settings.segment_windows
    camera, fresh = stream_source(workload, settings), stream_source(workload, settings, True)
    root = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    site = Site(Path(root))
    first = site.base_model(spec)

    def reference() -> torch.nn.Module:
        images, labels = _segment_data(fresh, trace, ABRUPT, None)
        return train_reference(first, images, labels, workload.reference_epochs, ABRUPT)

    update = spec.update
    return AbruptDrift(
        windows=settings.segment_windows,
        window_s=settings.window_s,
        camera=lambda w: camera(start + w),
        fresh=lambda w: fresh(start + w),
        first=first,
        recipe=TrainConfig(lr=update.learning_rate, momentum=update.momentum, cosine=True),
        golden=lambda: site.golden(spec),
        reference=reference,
    )


def accuracy(model: torch.nn.Module, window: Window) -> float:
    images, labels = window
    return float((predict(model, images) == labels).mean())
