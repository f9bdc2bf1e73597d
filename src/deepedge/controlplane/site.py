"""What the control plane measures: the live traffic the data plane sampled, its labels,
and how each stored model version serves it (torch; imported by the control loop only).

**Windows are live traffic.** Window ``w`` of a deployment is the requests its endpoint
served in ``[due_w - window_s, due_w)`` that the data plane sampled into the site's sample
store (:mod:`deepedge.dataplane.sample_store`). A window is labelled once, when the loop
scores it: every sample the application labelled (feedback) keeps its label, and a seeded
``update.label_fraction`` share of the others is labelled by the deployment's golden
labeller (the golden CNN ensemble of the site's digits, or the workload's labeller); those
labels are written back to the store, so the update that later trains on the window reads
the same labels. Served accuracy is the accuracy of the predictions the data plane actually
returned; a version's accuracy on requests another version answered (the version it
replaced, scored in the shadow; the serving version on the canary's share) is computed here
on the same samples.

**Versions are whole models** (parameters and buffers), stored and loaded by
:mod:`deepedge.controlplane.artifacts`, **and served as TorchScript**
(:mod:`deepedge.learning.export`): each version is exported once to a frozen TorchScript
file beside its artifact, which the data plane's replicas and the scoring here load; a
user's model is built and exported in a child process
(:mod:`deepedge.controlplane.serving_export`), never in this one.

**The site's digits.** ``workload: digits`` deployments start from the edge CNN trained
offline on the drifting stream's first windows (standing in for the model a site brings);
the stream itself reaches the deployment only through a camera client
(``deepedge camera``), as requests.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from deepedge.controlplane.artifacts import export_torchscript, load_version, served_path
from deepedge.controlplane.deployment_spec import DeploymentSpec, Labeller
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import GOLDEN, SampleStore, StoredSample, sample_store_path
from deepedge.learning.drift_severity import drift_severity
from deepedge.learning.export import ServedModel, load_served, save_served, sidecar
from deepedge.learning.models import GoldenModel, make_edge_model
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, load_digits_images
from deepedge.learning.training import TrainConfig, predict, train_epochs, train_golden

if TYPE_CHECKING:
    from deepedge.workload.resolve import Workload

log = logging.getLogger(__name__)

IMAGE_SIZE = 16
EDGE_WIDTH = 8
DIGIT_CLASSES = tuple(str(d) for d in range(10))
GOLDEN_POOL, GOLDEN_EPOCHS, GOLDEN_MEMBERS = 4000, 8, 3
MODEL_CACHE = 64


@dataclass(frozen=True)
class TrafficWindow:
    """The labelled samples of one window of live traffic (what every decision is made on).

    Arrays are aligned per sample; ``routes`` and ``versions`` say how each request was
    answered and by which version, ``predictions`` what it was answered."""

    index: int
    start: float
    end: float
    severity: float
    request_ids: tuple[str, ...]
    images: np.ndarray
    labels: np.ndarray
    predictions: np.ndarray
    versions: np.ndarray
    routes: tuple[RouteKind, ...]
    sampled: int  # every sample of the window, labelled or not

    def share(self, kind: RouteKind) -> np.ndarray:
        return np.array([r is kind for r in self.routes], dtype=bool)


class Site:
    """Streams, labellers, the sample store and loaded versions, cached across windows."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.samples = SampleStore(sample_store_path(root))
        self._source: ImageSet | None = None
        self._streams: dict[tuple[int, int, int, int], DriftingStream] = {}
        self._golden: dict[str, GoldenModel] = {}
        self._preparing: set[str] = set()
        self._preparing_lock = threading.Lock()
        self._models: OrderedDict[tuple[Path, float], torch.jit.ScriptModule] = OrderedDict()
        self._workloads: dict[str, Workload] = {}
        self._reference: dict[str, np.ndarray] = {}
        torch.set_num_threads(1)  # the manager shares the host with the learners

    # -- the deployment's data --------------------------------------------------------------

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

    def base_images(self, spec: DeploymentSpec) -> tuple[np.ndarray, np.ndarray]:
        """The base windows the first version learns from: images and true labels."""
        workload = self.workload(spec)
        if workload is not None:
            base = [self._workload_window(workload, t) for t in range(spec.base_windows)]
            return np.concatenate([w[0] for w in base]), np.concatenate([w[1] for w in base])
        stream = self.stream(spec)
        windows = [stream.window(t) for t in range(spec.base_windows)]
        return (
            np.concatenate([w.images for w in windows]),
            np.concatenate([w.labels for w in windows]),
        )

    def served_model(self, spec: DeploymentSpec) -> ServedModel:
        workload = self.workload(spec)
        if workload is None:
            return ServedModel((1, IMAGE_SIZE, IMAGE_SIZE), DIGIT_CLASSES)
        return ServedModel(workload.input_shape, workload.class_names)

    # -- golden labels ----------------------------------------------------------------------

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

    def golden_labels(self, spec: DeploymentSpec, images: np.ndarray) -> np.ndarray | None:
        """The golden labeller's labels (None: the deployment has none, only feedback)."""
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        workload = self.workload(spec)
        if workload is not None:
            if workload.labeller is None:
                return None  # labels-present: live requests carry none but feedback's
            return np.asarray(workload.labeller(images), dtype=np.int64)
        if spec.labeller is Labeller.GROUND_TRUTH:
            return None  # the ground truth reaches live traffic only as feedback
        return predict(self.golden(spec), images)

    # -- windows of live traffic ------------------------------------------------------------

    def traffic(
        self, deployment_id: str, spec: DeploymentSpec, index: int, start: float, end: float,
        now: float,
    ) -> TrafficWindow:  # fmt: skip
        """Window ``index`` (``[start, end)``) of the deployment's sampled traffic, labelled
        (module docstring); deterministic in the samples and the seed."""
        samples = self.samples.window(deployment_id, start, end)
        chosen = self._to_label(spec, index, samples)
        todo = [s for s in chosen if s.label is None]
        if todo:
            labels = self.golden_labels(spec, np.stack([s.input for s in todo]))
            if labels is not None:
                pairs = [(s.request_id, int(y)) for s, y in zip(todo, labels, strict=True)]
                self.samples.label_many(deployment_id, pairs, GOLDEN, now)
                fresh = dict(pairs)
                chosen = [
                    _with_label(s, fresh[s.request_id]) if s.request_id in fresh else s
                    for s in chosen
                ]
        labelled = [s for s in chosen if s.label is not None]
        return _window(index, start, end, labelled, len(samples),
                       self.severity(spec, [s.input for s in samples]))  # fmt: skip

    def _to_label(
        self, spec: DeploymentSpec, index: int, samples: Sequence[StoredSample]
    ) -> list[StoredSample]:
        """Every sample with a label already (feedback, or golden from an earlier look),
        plus a seeded ``label_fraction`` share of the rest."""
        have = [s for s in samples if s.label is not None]
        rest = [s for s in samples if s.label is None]
        if not rest:
            return have
        n = round(spec.update.label_fraction * len(samples)) - len(have)
        n = max(0, min(len(rest), n))
        rng = np.random.default_rng([spec.stream.seed, index, 7])
        picked = set(rng.choice(len(rest), size=n, replace=False).tolist()) if n else set()
        chosen = have + [s for i, s in enumerate(rest) if i in picked]
        return sorted(chosen, key=lambda s: (s.at, s.request_id))

    def labelled_between(
        self, deployment_id: str, ranges: Sequence[tuple[float, float]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The labelled samples of the given time ranges (training data), oldest first."""
        images, labels = [], []
        for start, end in ranges:
            for s in self.samples.window(deployment_id, start, end):
                if s.label is not None:
                    images.append(s.input)
                    labels.append(s.label)
        if not images:
            return np.zeros((0,), dtype=np.float32), np.zeros(0, dtype=np.int64)
        return np.stack(images).astype(np.float32), np.asarray(labels, dtype=np.int64)

    def severity(self, spec: DeploymentSpec, inputs: Sequence[np.ndarray]) -> float:
        """How far the window's sampled inputs drifted from the base windows the first
        version learned (:func:`~deepedge.learning.drift_severity.drift_severity`: 0 alike,
        1 told apart by every input); 0.0 without samples."""
        if len(inputs) == 0:
            return 0.0
        key = json.dumps([spec.user_workload, spec.stream.model_dump(), spec.base_windows],
                         sort_keys=True, default=str)  # fmt: skip
        if key not in self._reference:
            self._reference[key] = self.base_images(spec)[0]
        reference = self._reference[key]
        window = np.stack(inputs)
        if window.shape[1:] != reference.shape[1:]:
            return 0.0
        return drift_severity(reference, window, seed=spec.stream.seed)

    # -- versions ---------------------------------------------------------------------------

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

    def export(self, spec: DeploymentSpec, artifact: Path) -> Path:
        """The version's TorchScript file for serving and scoring (exported once)."""
        path = served_path(artifact)
        if path.exists() and sidecar(path).exists():
            return path
        if spec.user_workload is not None:
            from deepedge.controlplane.serving_export import export_in_subprocess

            export_in_subprocess(spec, artifact, path)
            return path
        served = self.served_model(spec)
        example = torch.rand(2, *served.input_shape)
        save_served(export_torchscript(load_version(spec, artifact), example), served, path)
        return path

    def model(self, spec: DeploymentSpec, artifact: Path) -> torch.jit.ScriptModule:
        """A stored version as it is served: its TorchScript export (cached)."""
        path = self.export(spec, artifact)
        key = (path, path.stat().st_mtime)
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        module = load_served(path)
        self._models[key] = module
        while len(self._models) > MODEL_CACHE:
            self._models.popitem(last=False)
        return module

    def predictions(self, spec: DeploymentSpec, artifact: Path, images: np.ndarray) -> np.ndarray:
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        return predict(self.model(spec, artifact), images)

    def accuracy(
        self, spec: DeploymentSpec, artifact: Path, images: np.ndarray, labels: np.ndarray
    ) -> float | None:
        """The stored version's accuracy on a labelled sample (None when it is empty)."""
        if len(labels) == 0:
            return None
        return float(np.mean(self.predictions(spec, artifact, images) == labels))


def _with_label(sample: StoredSample, label: int) -> StoredSample:
    return StoredSample(sample.request_id, sample.at, sample.version, sample.route,
                        sample.prediction, sample.input, label, GOLDEN)  # fmt: skip


def _window(
    index: int, start: float, end: float, labelled: Sequence[StoredSample], sampled: int,
    severity: float,
) -> TrafficWindow:  # fmt: skip
    if labelled:
        images = np.stack([s.input for s in labelled]).astype(np.float32)
    else:
        images = np.zeros((0,), dtype=np.float32)
    return TrafficWindow(
        index=index,
        start=start,
        end=end,
        severity=severity,
        request_ids=tuple(s.request_id for s in labelled),
        images=images,
        labels=np.asarray([s.label for s in labelled], dtype=np.int64),
        predictions=np.asarray([s.prediction for s in labelled], dtype=np.int64),
        versions=np.asarray([s.version for s in labelled], dtype=np.int64),
        routes=tuple(s.route for s in labelled),
        sampled=sampled,
    )
