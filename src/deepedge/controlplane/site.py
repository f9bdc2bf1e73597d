"""What the control plane measures: the site's drifting windows, golden labels, and how
well each stored model version serves them (torch; imported by the control loop only).

Serving is emulated: the deployment's nodes are the emulated testbed, and the served
predictions of a window are the registered version's predictions on that window's
images, computed here. The *canary share* is the traffic of the canary nodes: a fixed,
seeded ``fraction`` of the window's samples.

The data is the site's drifting digits stream (``workload: digits``, labelled by a golden
CNN ensemble or by its own labels) or a user's workload (:mod:`deepedge.workload`: a
bundled name, a workload file or an inline document): its windows in time order, replayed
in a loop when there are only so many (window ``t`` reads window ``t mod N``), labelled by
the workload's labeller (its own labels without one), and its model built by the
workload's factory, so its own code runs in this (the manager's) process, never in the API.

Versions are whole models (parameters and buffers), stored and loaded by
:mod:`deepedge.controlplane.artifacts`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from deepedge.controlplane.artifacts import load_version
from deepedge.controlplane.deployment_spec import DeploymentSpec, Labeller
from deepedge.learning.models import GoldenModel, make_edge_model
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, load_digits_images
from deepedge.learning.training import TrainConfig, predict, train_epochs, train_golden

if TYPE_CHECKING:
    from deepedge.workload.resolve import Workload

log = logging.getLogger(__name__)

IMAGE_SIZE = 16
EDGE_WIDTH = 8
GOLDEN_POOL, GOLDEN_EPOCHS, GOLDEN_MEMBERS = 4000, 8, 3
MODEL_CACHE = 256


@dataclass(frozen=True)
class LabelledWindow:
    """The golden-labelled sample of one window (what every decision is made on)."""

    index: int
    severity: float
    images: np.ndarray
    labels: np.ndarray  # golden labels
    canary_mask: np.ndarray  # True where the canary nodes served the sample


class Site:
    """Streams, golden labellers and loaded versions, cached across windows."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._source: ImageSet | None = None
        self._streams: dict[tuple[int, int, int, int], DriftingStream] = {}
        self._golden: dict[str, GoldenModel] = {}
        self._preparing: set[str] = set()
        self._preparing_lock = threading.Lock()
        self._models: OrderedDict[Path, torch.nn.Module] = OrderedDict()
        self._workloads: dict[str, Workload] = {}
        torch.set_num_threads(1)  # the manager shares the host with the learners

    def workload(self, spec: DeploymentSpec) -> Workload | None:
        """The deployment's user workload, loaded once (None for the site's digits)."""
        reference = spec.user_workload
        if reference is None:
            return None
        key = json.dumps(reference, sort_keys=True)
        if key not in self._workloads:
            from deepedge.workload.resolve import load_workload

            self._workloads[key] = load_workload(reference)
        return self._workloads[key]

    def _workload_window(
        self, workload: Workload, index: int
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Window ``index`` (mod the workload's windows): images, golden labels, severity."""
        n = workload.source.n_windows
        data = workload.window(index % n if n else index)
        return data.images, workload.label(data.images, data.labels), data.severity

    def source(self) -> ImageSet:
        if self._source is None:
            self._source = load_digits_images(IMAGE_SIZE)
        return self._source

    def stream(self, spec: DeploymentSpec) -> DriftingStream:
        s = spec.stream
        key = (s.seed, s.window_size, s.onset_window, s.ramp_windows)
        if key not in self._streams:
            config = DriftConfig(
                seed=s.seed,
                window_size=s.window_size,
                eval_size=1,
                onset_window=s.onset_window,
                ramp_windows=s.ramp_windows,
            )
            self._streams[key] = DriftingStream(self.source(), config)
        return self._streams[key]

    def _golden_key(self, spec: DeploymentSpec) -> str:
        stream = self.stream(spec)
        return hashlib.sha256(
            repr((stream.config, GOLDEN_POOL, GOLDEN_EPOCHS, GOLDEN_MEMBERS)).encode()
        ).hexdigest()[:16]

    def labeller_ready(self, spec: DeploymentSpec) -> bool:
        """True when the deployment's labels can be had at once; else the golden ensemble
        is being trained (or loaded) in a background thread, started here if need be, so
        that one new stream never holds up the other deployments' windows."""
        if spec.labeller is Labeller.GROUND_TRUTH or spec.user_workload is not None:
            return True
        key = self._golden_key(spec)
        if key in self._golden:
            return True
        with self._preparing_lock:
            if key not in self._preparing:
                self._preparing.add(key)
                threading.Thread(
                    target=self._prepare, args=(spec, key), name=f"golden-{key}", daemon=True
                ).start()
        return False

    def _prepare(self, spec: DeploymentSpec, key: str) -> None:
        try:
            self.golden(spec)
        except Exception:
            log.exception("training the golden labeller failed")
        finally:
            with self._preparing_lock:
                self._preparing.discard(key)

    def golden(self, spec: DeploymentSpec) -> GoldenModel:
        """The golden ensemble for the deployment's stream (trained once, cached on disk)."""
        stream = self.stream(spec)
        key = self._golden_key(spec)
        if key in self._golden:
            return self._golden[key]
        path = self.root / "golden" / f"golden-{key}.pt"
        golden = GoldenModel(stream.n_classes, stream.image_size, GOLDEN_MEMBERS)
        if path.exists():
            golden.load_state_dict(torch.load(path, weights_only=True))
        else:
            log.info("training the golden labeller for stream seed %d", spec.stream.seed)
            x, y = stream.augmented_pool(GOLDEN_POOL, seed=spec.stream.seed)
            golden = train_golden(
                x, y, stream.n_classes, stream.image_size, GOLDEN_EPOCHS, GOLDEN_MEMBERS,
                spec.stream.seed, device="cpu",
            )  # fmt: skip
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(golden.state_dict(), path.with_suffix(".tmp"))
            os.replace(path.with_suffix(".tmp"), path)
        golden.eval()
        self._golden[key] = golden
        return golden

    def labelled(self, spec: DeploymentSpec, index: int) -> LabelledWindow:
        """Window ``index``'s golden-labelled sample (deterministic in seed and index)."""
        rng = np.random.default_rng([spec.stream.seed, index, 7])
        workload = self.workload(spec)
        if workload is not None:
            all_images, all_labels, severity = self._workload_window(workload, index)
            n = max(1, round(spec.update.label_fraction * len(all_labels)))
            chosen = np.sort(rng.choice(len(all_labels), size=n, replace=False))
            images, labels = all_images[chosen], all_labels[chosen]
        else:
            window = self.stream(spec).window(index)
            severity = window.transform.severity
            n = max(1, round(spec.update.label_fraction * len(window.labels)))
            chosen = np.sort(rng.choice(len(window.labels), size=n, replace=False))
            images = window.images[chosen]
            if spec.labeller is Labeller.GROUND_TRUTH:
                labels = window.labels[chosen]
            else:
                labels = predict(self.golden(spec), images)
        canary = rng.random(n) < spec.canary.fraction
        return LabelledWindow(index, severity, images, labels, canary)

    def base_model(self, spec: DeploymentSpec) -> torch.nn.Module:
        """The first version, whole: the edge CNN trained offline on the base windows' true
        labels (the model a site starts from, as in the demo); a user's workload: its
        factory's model (warm-started when its training section says so) trained with its
        training section on its base windows' golden labels."""
        workload = self.workload(spec)
        if workload is not None:
            base = [self._workload_window(workload, t) for t in range(spec.base_windows)]
            from deepedge.workload.model import local_training

            mine = workload.model_factory()
            config = local_training(workload.spec.training)
            train_epochs(mine, np.concatenate([w[0] for w in base]),
                         np.concatenate([w[1] for w in base]), spec.base_epochs,
                         config, seed=spec.stream.seed)  # fmt: skip
            return mine.eval()
        stream = self.stream(spec)
        windows = [stream.window(t) for t in range(spec.base_windows)]
        model = make_edge_model(stream.n_classes, stream.image_size, EDGE_WIDTH, spec.stream.seed)
        train_epochs(
            model,
            np.concatenate([w.images for w in windows]),
            np.concatenate([w.labels for w in windows]),
            spec.base_epochs,
            TrainConfig(),
            seed=spec.stream.seed,
        )
        return model.eval()

    def model(self, spec: DeploymentSpec, path: Path) -> torch.nn.Module:
        """A stored version's whole model (cached)."""
        if path in self._models:
            self._models.move_to_end(path)
            return self._models[path]
        model = load_version(spec, path)
        self._models[path] = model
        while len(self._models) > MODEL_CACHE:
            self._models.popitem(last=False)
        return model

    def accuracy(
        self, spec: DeploymentSpec, path: Path, images: np.ndarray, labels: np.ndarray
    ) -> float | None:
        """The stored version ``path``'s accuracy on a golden-labelled sample."""
        if len(labels) == 0:
            return None
        return float(np.mean(predict(self.model(spec, path), images) == labels))
