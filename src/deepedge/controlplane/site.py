"""What the control plane measures: the live traffic the data plane sampled, its labels,
and how each stored model version serves it (torch; imported by the control loop only).

**Windows are live traffic.** Window ``w`` of a deployment is the requests its endpoint
served in ``[due_w - window_s, due_w)`` that the data plane sampled into the site's sample
store (:mod:`deepedge.dataplane.sample_store`). A window is labelled once, when the loop
scores it: every sample the application labelled (feedback) keeps its label, and a seeded
``update.label_fraction`` share of the others is labelled by the deployment's golden
labeller (the golden CNN ensemble of the site's digits,
:mod:`deepedge.controlplane.golden_labeller`, or the workload's labeller, run on the
window's samples at once in the tenant's sandbox): ``update.hard_fraction`` of those
are the answers the serving version was least sure of (they teach most; labelled
``golden-hard``), the others a seeded uniform draw. Those labels are written back to the
store, so the update that later trains on the window reads the same labels; every decision
is made on the uniform ones only (the hard ones would bias accuracy down). Served accuracy
is the accuracy of the predictions the data plane actually returned; a version's accuracy on
requests another version answered (the version it replaced, scored in the shadow; the
serving version on the canary's share) is computed here on the same samples.

**Versions are whole models** (parameters and buffers), stored and loaded by
:mod:`deepedge.controlplane.artifacts`, **and served as checked ONNX graphs**
(:mod:`deepedge.learning.export`, :mod:`deepedge.dataplane.served_graph`): each version is
exported once to an ONNX file beside its artifact, accepted only as a graph of allowed
tensor operators with static shapes, which the data plane's replicas and the scoring here
run with ONNX Runtime.

**A user's workload is tenant code**: its labeller, data source and model factory never run
in this process. Labelling, the drift reference (the base windows' images), the first
version, loading a job's result or an upload into the workload's model and the export run
in the deployment's tenant's sandbox (:mod:`deepedge.controlplane.tenant_workload`); here
only their files are read, and the checked graph is run for scoring (never TorchScript,
whose loading runs code).

**The site's digits.** ``workload: digits`` deployments start from the edge CNN trained
offline on the drifting stream's first windows (standing in for the model a site brings);
the stream itself reaches the deployment only through a camera client
(``deepedge camera``), as requests.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from deepedge.controlplane.artifacts import (
    export_served,
    load_version,
    model_from_file,
    served_path,
    write_version,
)
from deepedge.controlplane.deployment_spec import DeploymentSpec, Labeller
from deepedge.controlplane.golden_labeller import GoldenLabellers
from deepedge.controlplane.records import DeploymentRecord
from deepedge.core.errors import InvalidInputError, TenantCodeError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import (
    CHOSEN_SOURCES,
    GOLDEN,
    GOLDEN_HARD,
    SampleStore,
    StoredSample,
    sample_store_path,
)
from deepedge.dataplane.served_graph import GraphSession
from deepedge.learning.drift_severity import drift_severity
from deepedge.learning.export import ServedModel, save_served, sidecar
from deepedge.learning.models import GoldenModel, make_edge_model
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, load_digits_images
from deepedge.learning.training import TrainConfig, predict, train_epochs

if TYPE_CHECKING:
    from deepedge.controlplane.tenant_workload import TenantWorkloads

log = logging.getLogger(__name__)

IMAGE_SIZE = 16
EDGE_WIDTH = 8
DIGIT_CLASSES = tuple(str(d) for d in range(10))
MODEL_CACHE = 64
LATE_LABEL_HORIZON_WINDOWS = 12  # feedback this many windows late still counts (Site.traffic)


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
    problem: str | None = None  # why none of its samples could be labelled, if so
    chosen: int = 0  # labels of answers chosen to teach (least sure, or told apart), besides
    # ``labels`` (what an update on this window trains on is both, less ``late``)
    late: int = 0  # of ``labels``, feedback for earlier windows' requests (Site.traffic)

    def share(self, kind: RouteKind) -> np.ndarray:
        return np.array([r is kind for r in self.routes], dtype=bool)


class Site:
    """Streams, labellers, the sample store and loaded versions, cached across windows.

    ``workloads`` runs the user workloads' code in their tenants' sandboxes (a site without
    it serves only the site's digits)."""

    def __init__(self, root: Path, workloads: TenantWorkloads | None = None) -> None:
        self.root = root
        self.workloads = workloads
        self.samples = SampleStore(sample_store_path(root))
        self._source: ImageSet | None = None
        self._streams: dict[tuple[int, int, int, int], DriftingStream] = {}
        self._golden = GoldenLabellers()
        self._models: OrderedDict[tuple[Path, float], GraphSession] = OrderedDict()
        self._no_labeller: set[str] = set()  # user workloads whose labels come as feedback
        self._reference: dict[str, np.ndarray] = {}
        self._cache_lock = threading.Lock()  # the loop advances deployments in threads
        torch.set_num_threads(1)  # the manager shares the host with the learners

    # -- the deployment's data --------------------------------------------------------------

    def tenant_code(self, deployment: DeploymentRecord) -> TenantWorkloads:
        """Where the deployment's user workload runs (its tenant's sandbox)."""
        if self.workloads is None:
            raise RuntimeError(f"deployment {deployment.name}: this site runs no tenant code")
        return self.workloads

    def source(self) -> ImageSet:
        with self._cache_lock:
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
        """The site's digits' base windows the first version learns from: images and true
        labels."""
        stream = self.stream(spec)
        windows = [stream.window(t) for t in range(spec.base_windows)]
        return (
            np.concatenate([w.images for w in windows]),
            np.concatenate([w.labels for w in windows]),
        )

    def served_model(self) -> ServedModel:
        """What the site's digits model is served as."""
        return ServedModel((1, IMAGE_SIZE, IMAGE_SIZE), DIGIT_CLASSES)

    # -- golden labels ----------------------------------------------------------------------

    def labeller_ready(self, spec: DeploymentSpec) -> bool:
        """True when the deployment's labels can be had at once; else the golden ensemble
        is being trained (or loaded) in a background thread, started here if need be, so
        that one new stream never holds up the other deployments' windows."""
        if spec.labeller is Labeller.GROUND_TRUTH or spec.user_workload is not None:
            return True
        return self._golden.ready(self.stream(spec))

    def golden(self, spec: DeploymentSpec) -> GoldenModel:
        """The golden ensemble for the deployment's stream (trained once, cached on disk)."""
        return self._golden.model(self.stream(spec))

    def golden_labels(self, deployment: DeploymentRecord, images: np.ndarray) -> np.ndarray | None:
        """The golden labeller's labels (None: the deployment has none, only feedback); a
        user workload's labeller labels all of ``images`` in one run in its sandbox."""
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        spec = deployment.spec
        if spec.user_workload is not None:
            key = _workload_key(deployment)
            if key in self._no_labeller:
                return None  # labels-present: live requests carry none but feedback's
            labels = self.tenant_code(deployment).labels(deployment, images)
            if labels is None:
                self._no_labeller.add(key)
            return labels
        if spec.labeller is Labeller.GROUND_TRUTH:
            return None  # the ground truth reaches live traffic only as feedback
        return predict(self.golden(spec), images)

    # -- windows of live traffic ------------------------------------------------------------

    def traffic(
        self, deployment: DeploymentRecord, index: int, start: float, end: float, now: float,
        recovery: bool = False, moved: bool = False, late_since: float | None = None,
    ) -> TrafficWindow:  # fmt: skip
        """Window ``index`` (``[start, end)``) of the deployment's sampled traffic, labelled
        (module docstring); deterministic in the samples and the seed. ``recovery``: the
        site recovers from a drift (:func:`recovering`); ``moved``: the window follows one
        that ended where its inputs moved (at the recovery share). A window whose
        labels show the serving version below the trigger's threshold is labelled at once to
        the recovery share: the drift's first update learns from all of its first window.

        ``late_since``: when the window before closed. The application's feedback for
        requests of earlier windows (up to :data:`LATE_LABEL_HORIZON_WINDOWS` back) that
        arrived since then counts in this window: a label that came after its own window
        closed is told once, here, not lost to every decision (a camera whose feedback ran
        10 s behind left a site blind for 28 windows)."""
        share = label_fraction(deployment, recovery, moved)
        late = self._late(deployment, start, late_since)
        window = self._labelled(deployment, index, start, end, now, share, late)
        dropped = _served_below(window, deployment.spec.trigger.accuracy_threshold)
        if dropped is not None and not recovering(deployment, recovery):
            raised = label_fraction(dataclasses.replace(deployment, last_accuracy=dropped), False)
            if raised > share:
                return self._labelled(deployment, index, start, end, now, raised, late)
        return window

    def _late(self, deployment: DeploymentRecord, start: float,
              since: float | None) -> list[StoredSample]:  # fmt: skip
        """Feedback labels of requests served before ``start`` that arrived after ``since``
        (:meth:`traffic`)."""
        if since is None:
            return []
        horizon = start - LATE_LABEL_HORIZON_WINDOWS * deployment.spec.window_s
        return self.samples.labelled_late(deployment.id, horizon, start, since)

    def _labelled(
        self, deployment: DeploymentRecord, index: int, start: float, end: float, now: float,
        share: float, late: Sequence[StoredSample] = (),
    ) -> TrafficWindow:  # fmt: skip
        deployment_id = deployment.id
        samples = self.samples.window(deployment_id, start, end)
        chosen, hard = self._to_label(deployment, index, samples, share)
        todo = [s for s in chosen if s.label is None]
        problem = None
        if todo:
            try:
                labels = self.golden_labels(deployment, np.stack([s.input for s in todo]))
            except TenantCodeError as exc:  # failed or ran out of time: the window goes on
                labels, problem = None, f"window {index} not labelled: {exc.message}"
            if labels is not None:
                fresh = {s.request_id: int(y) for s, y in zip(todo, labels, strict=True)}
                for source, ids in ((GOLDEN, fresh.keys() - hard), (GOLDEN_HARD, hard)):
                    pairs = [(rid, fresh[rid]) for rid in ids if rid in fresh]
                    self.samples.label_many(deployment_id, pairs, source, now)
                chosen = [
                    _with_label(s, fresh[s.request_id], GOLDEN_HARD if s.request_id in hard
                                else GOLDEN) if s.request_id in fresh else s
                    for s in chosen
                ]  # fmt: skip
        # decisions are made on the unbiased share: the hardest answers (or those two
        # versions answered apart) labelled for training would make every version look
        # worse than it serves (a window labelled whole has no such bias: all of it counts)
        whole = len(chosen) == len(samples) and all(s.label is not None for s in chosen)
        labelled = [s for s in chosen if s.label is not None
                    and (whole or s.label_source not in CHOSEN_SOURCES)]  # fmt: skip
        chosen_only = sum(1 for s in chosen if s.label is not None) - len(labelled)
        # late feedback is no chosen share: unbiased, like the window's own
        window = _window(index, start, end, [*late, *labelled], len(samples),
                         self.severity(deployment, [s.input for s in samples]))  # fmt: skip
        return dataclasses.replace(window, problem=problem, chosen=chosen_only, late=len(late))

    def _to_label(
        self, deployment: DeploymentRecord, index: int, samples: Sequence[StoredSample],
        share: float,
    ) -> tuple[list[StoredSample], set[str]]:  # fmt: skip
        """Every sample with a label already (feedback, or golden from an earlier look),
        plus ``share`` (:func:`label_fraction`) of the window's samples more: ``hard_fraction`` of
        them the answers the serving version was least sure of (smallest margin between its
        two most likely classes: what teaches most), the rest a seeded uniform draw (what
        every decision is made on); when that is every sample, none is picked, so all are
        the unbiased share. The request ids of the hard ones come second."""
        spec = deployment.spec
        have = [s for s in samples if s.label is not None]
        rest = [s for s in samples if s.label is None]
        if not rest:
            return have, set()
        n = round(share * len(samples)) - len(have)
        n = max(0, min(len(rest), n))
        # every sample labelled: nothing was chosen, so all of them are the unbiased share
        n_hard = (round(spec.update.hard_fraction * n)
                  if deployment.serving_version and n < len(rest) else 0)  # fmt: skip
        rng = np.random.default_rng([spec.stream.seed, index, 7])
        picked = set(rng.choice(len(rest), size=n - n_hard, replace=False).tolist())
        hard: set[str] = set()
        if n_hard:
            left = [i for i in range(len(rest)) if i not in picked]
            margins = self.margins(deployment, np.stack([rest[i].input for i in left]))
            chosen_hard = [left[j] for j in np.argsort(margins, kind="stable")[:n_hard]]
            picked |= set(chosen_hard)
            hard = {rest[i].request_id for i in chosen_hard}
        chosen = have + [s for i, s in enumerate(rest) if i in picked]
        return sorted(chosen, key=lambda s: (s.at, s.request_id)), hard

    def margins(self, deployment: DeploymentRecord, images: np.ndarray) -> np.ndarray:
        """How sure the serving version is of each image: its two most likely classes'
        probability difference (0: a coin flip)."""
        assert deployment.serving_version is not None
        from deepedge.controlplane.artifacts import artifact_path

        artifact = artifact_path(self.root, deployment, deployment.serving_version)
        logits = self.model(deployment, artifact).run(images)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = shifted / shifted.sum(axis=1, keepdims=True)
        top = np.sort(probs, axis=1)
        margins: np.ndarray = top[:, -1] - top[:, -2] if probs.shape[1] > 1 else top[:, -1]
        return margins

    def severity(self, deployment: DeploymentRecord, inputs: Sequence[np.ndarray]) -> float:
        """How far the window's sampled inputs drifted from the base windows the first
        version learned (:func:`~deepedge.learning.drift_severity.drift_severity`: 0 alike,
        1 told apart by every input); 0.0 without samples."""
        if len(inputs) == 0:
            return 0.0
        spec = deployment.spec
        key = _workload_key(deployment)
        if key not in self._reference:
            if spec.user_workload is not None:
                self._reference[key] = self.tenant_code(deployment).reference(deployment)
            else:
                self._reference[key] = self.base_images(spec)[0]
        reference = self._reference[key]
        window = np.stack(inputs)
        if window.shape[1:] != reference.shape[1:]:
            return 0.0
        return drift_severity(reference, window, seed=spec.stream.seed)

    # -- versions ---------------------------------------------------------------------------

    def write_first(self, deployment: DeploymentRecord, artifact: Path) -> None:
        """The first version at ``artifact`` and its export (module docstring): the site's
        digits' :meth:`base_model`; a user's workload: its factory's model (warm-started
        when its training section says so) trained with its training section on its base
        windows' golden labels, in the tenant's sandbox."""
        spec = deployment.spec
        if spec.user_workload is None:
            if not artifact.exists():
                write_version(artifact, self.base_model(spec))
            self.export(deployment, artifact)
            return
        if artifact.exists():
            self.export(deployment, artifact)
            return
        images = self.tenant_code(deployment).first_version(deployment, artifact)
        self._reference[_workload_key(deployment)] = images

    def write_version(
        self, deployment: DeploymentRecord, model: Path, artifact: Path, parent: Path | None
    ) -> None:
        """The model file ``model`` (a job's result, an upload) loaded into the deployment's
        model and written as the version ``artifact``; flat weights take the buffers of the
        version at ``parent``. A user's workload's model is built in the tenant's sandbox."""
        from deepedge.learning.model_state import (
            ModelFileKind,
            buffer_arrays,
            load_buffers,
            model_file_kind,
        )

        spec = deployment.spec
        if spec.user_workload is not None:
            self.tenant_code(deployment).version(deployment, model, artifact, parent)
            return
        if model_file_kind(model) is ModelFileKind.TORCHSCRIPT:  # code: never loaded here
            raise InvalidInputError(
                "model: the site's digits take a state_dict or flat weights, not TorchScript",
                field="model",
            )
        loaded = model_from_file(spec, model)
        if model_file_kind(model) is ModelFileKind.FLAT and parent is not None:
            load_buffers(loaded, buffer_arrays(load_version(spec, parent)))
        write_version(artifact, loaded)

    def base_model(self, spec: DeploymentSpec) -> torch.nn.Module:
        """The site's digits' first version, whole: the edge CNN trained offline on the
        base windows' true labels (the model a site starts from, as in the demo)."""
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

    def export(self, deployment: DeploymentRecord, artifact: Path) -> Path:
        """The version's ONNX graph for serving and scoring (exported once; a user's model
        in the tenant's sandbox, the site's digits CNN here: its code is deepedge's and its
        artifact a state_dict of tensors)."""
        path = served_path(artifact)
        if path.exists() and sidecar(path).exists():
            return path
        spec = deployment.spec
        if spec.user_workload is not None:
            self.tenant_code(deployment).export(deployment, artifact)
            return path
        served = self.served_model()
        example = torch.rand(2, *served.input_shape)
        save_served(export_served(load_version(spec, artifact), example, served), served, path)
        return path

    def model(self, deployment: DeploymentRecord, artifact: Path) -> GraphSession:
        """A stored version as it is served: its checked ONNX graph (cached), the only
        form of a tenant's model the control loop runs."""
        path = self.export(deployment, artifact)
        key = (path, path.stat().st_mtime)
        with self._cache_lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
        served = ServedModel.read(sidecar(path))
        module = GraphSession.load(path, served.input_shape, len(served.class_names))
        with self._cache_lock:
            self._models[key] = module
            while len(self._models) > MODEL_CACHE:
                self._models.popitem(last=False)
        return module

    def predictions(
        self, deployment: DeploymentRecord, artifact: Path, images: np.ndarray
    ) -> np.ndarray:
        if len(images) == 0:
            return np.zeros(0, dtype=np.int64)
        return self.model(deployment, artifact).predict(images)

    def accuracy(
        self, deployment: DeploymentRecord, artifact: Path, images: np.ndarray, labels: np.ndarray
    ) -> float | None:
        """The stored version's accuracy on a labelled sample (None when it is empty)."""
        if len(labels) == 0:
            return None
        return float(np.mean(self.predictions(deployment, artifact, images) == labels))


def _workload_key(deployment: DeploymentRecord) -> str:
    """What a deployment's labels and drift reference depend on: its tenant (a workload
    runs with its tenant's grants), its workload, stream and base windows."""
    spec = deployment.spec
    return json.dumps([deployment.tenant_id, spec.user_workload, spec.stream.model_dump(),
                       spec.base_windows], sort_keys=True, default=str)  # fmt: skip


def _with_label(sample: StoredSample, label: int, source: str) -> StoredSample:
    return dataclasses.replace(sample, label=label, label_source=source)


MIN_DROP_SAMPLES = 10  # uniform labels of the serving version that show a window's drop


def _served_below(window: TrafficWindow, threshold: float) -> float | None:
    """The serving version's accuracy on the window's unbiased labels when it is below
    ``threshold`` on at least ``MIN_DROP_SAMPLES`` of them, else None."""
    main = window.share(RouteKind.SERVING)
    if int(main.sum()) < MIN_DROP_SAMPLES:
        return None
    served = float(np.mean(window.predictions[main] == window.labels[main]))
    return served if served < threshold else None


def recovering(deployment: DeploymentRecord, recovery: bool) -> bool:
    """Whether the site is recovering: the control plane says so (``recovery``:
    :func:`deepedge.controlplane.recovery.recovery_under_way`, a drop's update, canary or
    follow-up under way; one a sample count or a schedule started is routine), or the last
    window's served accuracy is below the trigger's threshold."""
    if recovery:
        return True
    last = deployment.last_accuracy
    return last is not None and last < deployment.spec.trigger.accuracy_threshold


def label_fraction(deployment: DeploymentRecord, recovery: bool, moved: bool = False) -> float:
    """The share of a window's samples to golden-label: ``update.label_fraction``, raised to
    ``update.recovery_label_fraction`` while the site recovers (a drift's updates then
    learn from more of what it brought; the rest of the time the budget stays small) and
    on the short window after the inputs moved (``moved``: a new condition, told whole)."""
    update = deployment.spec.update
    if moved or recovering(deployment, recovery):
        return max(update.label_fraction, update.recovery_label_fraction)
    return update.label_fraction


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
