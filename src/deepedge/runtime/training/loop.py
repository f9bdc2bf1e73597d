"""The continuous-learning loop of Deep-Edge's Figure 1, end to end on one machine.

For each window ``t`` of the drifting stream:

1. **Serve.** The inference service (a Ray actor around :class:`VersionServer`) predicts the
   window's images with the current model version.
2. **Store.** The golden model labels a share (``label_fraction``) of the window; predicted
   and golden labels are kept in a buffer of the ``recent_windows`` latest windows.
3. **Trigger.** The golden-labelled accuracy of the served predictions goes to
   :func:`decide_trigger` (threshold, schedule or request).
4. **Update.** On a trigger, the buffer is split into training and validation data, the
   emulated testbed is planned with Deep-Edge (Algorithm 1 on estimates) and the model is
   retrained with the asynchronous parameter server (:func:`run_model_update`), stopping
   early on the Optimus fit.
5. **Swap.** The new weights are registered as the next version and swapped in atomically;
   when they score worse than the served model on the same validation data (a bad
   update), the service rolls back to the previous version.

Accuracy on each window's held-out images with *true* labels is recorded for the report;
decisions only ever use golden labels.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.model_state import buffer_arrays, load_buffers
from deepedge.learning.models import (
    GoldenModel,
    get_flat_weights,
    make_edge_model,
    set_flat_weights,
)
from deepedge.learning.stream import DriftConfig, DriftingStream, ImageSet, load_digits_images
from deepedge.learning.training import TrainConfig, accuracy, predict, train_epochs, train_golden
from deepedge.learning.trigger import TriggerFacts, TriggerKind, TriggerPolicy, decide_trigger
from deepedge.runtime.cluster.session import actor_options, ensure_ray
from deepedge.runtime.serving.version_server import VersionServer
from deepedge.runtime.training.monitor import StrikeBook, UpdateEvent
from deepedge.runtime.training.testbed import deep_edge_planner, paper_testbed
from deepedge.runtime.training.update import (
    FaultInjection,
    UpdateConfig,
    UpdateResult,
    run_model_update,
)
from deepedge.workload.resolve import Workload
from deepedge.workload.sources import NO_LABEL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopConfig:
    """The embedded defaults of the demo (all seeded)."""

    seed: int = 0
    n_windows: int = 7
    drift: DriftConfig = field(default_factory=DriftConfig)
    image_size: int = 16
    edge_width: int = 8
    base_windows: int = 2  # windows the initial model is trained on (offline, true labels)
    base_epochs: int = 8
    golden_pool: int = 4000  # augmented samples the golden model is trained on
    golden_epochs: int = 8
    golden_members: int = 3
    label_fraction: float = 1.0  # share of each window the golden model labels
    recent_windows: int = 2  # windows of labelled data one update trains on
    validation_fraction: float = 0.2
    trigger: TriggerPolicy = field(default_factory=lambda: TriggerPolicy(accuracy_threshold=0.8))
    update: UpdateConfig = field(default_factory=UpdateConfig)
    estimate_noise: float = 0.05  # relative error of the planner's estimates
    rollback_tolerance: float = 0.02  # roll back when new val acc < served val acc - this
    requested_windows: tuple[int, ...] = ()  # windows after which an update is requested
    fault: FaultInjection | None = None  # injected into the first update only
    torch_threads: int = 1  # driver-side training; one thread degrades best on a busy host

    def __post_init__(self) -> None:
        if self.n_windows < 1 or self.base_windows < 1:
            raise InvalidInputError("need n_windows >= 1 and base_windows >= 1", field="windows")
        if not 0.0 < self.label_fraction <= 1.0:
            raise InvalidInputError("label_fraction must be in (0, 1]", field="label_fraction")
        if not 0.0 < self.validation_fraction < 1.0:
            raise InvalidInputError("validation_fraction must be in (0, 1)", field="validation")


@dataclass(frozen=True)
class WindowRecord:
    window: int
    severity: float
    served_version: int
    served_accuracy: float  # served model on the window's held-out images, true labels
    golden_accuracy: float  # served predictions vs golden labels (what the trigger sees)
    trigger: TriggerKind
    update_index: int | None = None  # index into LoopResult.updates
    new_version: int | None = None
    updated_accuracy: float | None = None  # the new model on the same held-out images
    rolled_back: bool = False


@dataclass(frozen=True)
class LoopResult:
    config: LoopConfig
    windows: tuple[WindowRecord, ...]
    updates: tuple[UpdateResult, ...]
    golden_accuracy_last_window: float
    registry_dir: Path


def _split(
    x: np.ndarray, y: np.ndarray, frac: float, seed: int
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    order = np.random.default_rng(seed).permutation(len(y))
    n_val = max(1, round(frac * len(y)))
    val, tr = order[:n_val], order[n_val:]
    return (x[tr], y[tr]), (x[val], y[val])


def golden_model(
    stream: DriftingStream, config: LoopConfig, cache_dir: Path, say: Callable[[str], None]
) -> GoldenModel:
    """Train the golden ensemble, or load it from ``cache_dir`` when trained before.

    The cache key hashes everything the training depends on (stream config and source,
    pool size, epochs, members, seed), so a stale cache is never used.
    """
    key_src = repr(
        (
            config.drift,
            stream.source.images.shape,
            float(stream.source.images.sum()),
            config.golden_pool,
            config.golden_epochs,
            config.golden_members,
            config.seed,
        )
    )
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    path = cache_dir / f"golden-{key}.pt"
    golden = GoldenModel(stream.n_classes, stream.image_size, config.golden_members)
    if path.exists():
        golden.load_state_dict(torch.load(path, weights_only=True))
        golden.eval()
        say(f"loaded the golden model from {path}")
        return golden
    say(f"training the golden model ({config.golden_members} CNNs, {config.golden_pool} samples)")
    xa, ya = stream.augmented_pool(config.golden_pool, seed=config.seed)
    golden = train_golden(
        xa,
        ya,
        stream.n_classes,
        stream.image_size,
        config.golden_epochs,
        config.golden_members,
        config.seed,
        device="cpu",
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    torch.save(golden.state_dict(), path)
    return golden


@dataclass(frozen=True)
class FeedWindow:
    """What the loop sees of window ``t``: images, their true labels, held-out images."""

    index: int
    severity: float
    images: np.ndarray
    labels: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray


@dataclass(frozen=True)
class Feed:
    """Where the loop's model, data and golden labels come from."""

    factory: Callable[[], nn.Module]  # the edge model (its frozen layers set)
    window: Callable[[int], FeedWindow]
    golden: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (images, true labels) -> golden
    n_windows: int | None  # None: unbounded


def digits_feed(
    config: LoopConfig, source: ImageSet | None, cache_dir: Path, say: Callable[[str], None]
) -> Feed:
    """The embedded default: drifting digits (or ``source``), the edge CNN, a golden ensemble."""
    source = source or load_digits_images(config.image_size)
    stream = DriftingStream(source, config.drift)
    golden = golden_model(stream, config, cache_dir, say)

    def window(t: int) -> FeedWindow:
        w = stream.window(t)
        return FeedWindow(t, w.transform.severity, w.images, w.labels, w.eval_images, w.eval_labels)

    return Feed(
        factory=functools.partial(
            make_edge_model, stream.n_classes, stream.image_size, config.edge_width, config.seed
        ),
        window=window,
        golden=lambda images, _labels: predict(golden, images),
        n_windows=None,
    )


def workload_feed(workload: Workload) -> Feed:
    """A user's workload: its model, its windows, its labeller (or its own labels)."""

    def window(t: int) -> FeedWindow:
        w = workload.window(t)
        eval_labels = w.eval_labels
        if (eval_labels == NO_LABEL).any():  # scored against the labeller where none are given
            eval_labels = workload.label(w.eval_images, eval_labels)
        return FeedWindow(t, w.severity, w.images, w.labels, w.eval_images, eval_labels)

    return Feed(workload.model_factory, window, workload.label, workload.source.n_windows)


def run_loop(
    config: LoopConfig,
    workdir: Path,
    source: ImageSet | None = None,
    progress: Callable[[str], None] | None = None,
    on_event: Callable[[UpdateEvent], None] | None = None,
    workload: Workload | None = None,
    on_window: Callable[[WindowRecord], None] | None = None,
) -> LoopResult:
    """Run the loop of the module docstring; artefacts go under ``workdir``. With a
    ``workload``, its model, windows and labeller replace the digits, the edge CNN and the
    golden ensemble (``source`` is then ignored). ``on_window`` gets each window's record
    once the window is done (its update included)."""
    say = progress or (lambda message: log.info("%s", message))
    threads = torch.get_num_threads()
    torch.set_num_threads(config.torch_threads)
    try:
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        if workload is None:
            feed = digits_feed(config, source, workdir / "golden", say)
        else:
            workload.require_windows(config.n_windows)
            feed = workload_feed(workload)
        return _run_loop(config, workdir, feed, say, on_event, on_window)
    finally:
        torch.set_num_threads(threads)


def _run_loop(
    config: LoopConfig,
    workdir: Path,
    feed: Feed,
    say: Callable[[str], None],
    on_event: Callable[[UpdateEvent], None] | None,
    on_window: Callable[[WindowRecord], None] | None = None,
) -> LoopResult:
    rng = np.random.default_rng([config.seed, 99])
    factory = feed.factory
    base = factory()
    base_windows = [feed.window(t) for t in range(config.base_windows)]
    say(f"training the initial edge model on windows 0-{config.base_windows - 1}")
    train_epochs(
        base,
        np.concatenate([w.images for w in base_windows]),
        np.concatenate([feed.golden(w.images, w.labels) for w in base_windows]),
        config.base_epochs,
        TrainConfig(),
        seed=config.seed,
    )

    ensure_ray()
    registry_dir = workdir / "models"
    server = ray.remote(VersionServer).options(**{**actor_options(), "max_concurrency": 4})
    service: Any = server.remote(str(registry_dir), factory)
    served_weights, served_buffers = get_flat_weights(base), buffer_arrays(base)
    ray.get(service.deploy.remote(served_weights, None, "initial model", served_buffers))
    planner = deep_edge_planner(config.estimate_noise, config.seed)
    strikes = StrikeBook()
    buffer: list[tuple[np.ndarray, np.ndarray]] = []
    records: list[WindowRecord] = []
    updates: list[UpdateResult] = []
    last_update: int | None = None
    golden_last = float("nan")
    eval_model = factory()

    for t in range(config.n_windows):
        window = feed.window(t)
        reply = ray.get(service.predict.remote(window.images))
        n_label = max(1, round(config.label_fraction * len(window.labels)))
        labelled = np.sort(rng.choice(len(window.labels), size=n_label, replace=False))
        golden_labels = feed.golden(window.images[labelled], window.labels[labelled])
        golden_acc = float(np.mean(reply.labels[labelled] == golden_labels))
        eval_golden = feed.golden(window.eval_images, window.eval_labels)
        golden_last = float(np.mean(eval_golden == window.eval_labels))
        buffer = [*buffer, (window.images[labelled], golden_labels)][-config.recent_windows :]
        set_flat_weights(eval_model, served_weights)
        load_buffers(eval_model, served_buffers)
        served_acc = accuracy(eval_model, window.eval_images, window.eval_labels)
        kind = decide_trigger(
            config.trigger,
            TriggerFacts(t, golden_acc, last_update, requested=t in config.requested_windows),
        )
        say(
            f"window {t}: severity {window.severity:.2f}, served v{reply.version}, "
            f"accuracy {served_acc:.3f} (golden-labelled {golden_acc:.3f})"
            + (f" -> update ({kind.value})" if kind is not TriggerKind.NONE else "")
        )
        record = WindowRecord(t, window.severity, reply.version, served_acc, golden_acc, kind)
        if kind is not TriggerKind.NONE:
            x = np.concatenate([b[0] for b in buffer])
            y = np.concatenate([b[1] for b in buffer])
            train, val = _split(x, y, config.validation_fraction, config.seed + t)
            faults = (config.fault,) if (config.fault is not None and not updates) else ()
            update_config = dataclasses.replace(config.update, faults=faults)
            result = run_model_update(
                paper_testbed(len(train[1])),
                train,
                val,
                factory,
                served_weights,
                workdir / "updates" / f"update-{len(updates) + 1}",
                planner=planner,
                config=update_config,
                resume=False,
                strikes=strikes,
                on_event=on_event,
                initial_buffers=served_buffers,
            )
            updates.append(result)
            set_flat_weights(eval_model, served_weights)
            load_buffers(eval_model, served_buffers)
            old_val = accuracy(eval_model, val[0], val[1])
            new_version = ray.get(
                service.deploy.remote(
                    result.weights,
                    result.final_accuracy,
                    f"update at window {t}",
                    result.buffers,
                )
            )
            rolled_back = result.final_accuracy < old_val - config.rollback_tolerance
            if rolled_back:
                ray.get(service.rollback.remote())
                say(
                    f"  update v{new_version} scored {result.final_accuracy:.3f} "
                    f"< {old_val:.3f}: rolled back"
                )
            else:
                served_weights, served_buffers = result.weights, result.buffers
            set_flat_weights(eval_model, result.weights)
            load_buffers(eval_model, result.buffers)
            new_acc = accuracy(eval_model, window.eval_images, window.eval_labels)
            say(
                f"  update {len(updates)}: {len(result.accuracies)} epochs "
                f"({result.stop_reason.value}), {len(result.plan.selected_ids)} workers, "
                f"restarts {result.restarts}; window {t} accuracy {served_acc:.3f} -> {new_acc:.3f}"
            )
            last_update = t
            record = dataclasses.replace(
                record,
                update_index=len(updates) - 1,
                new_version=new_version,
                updated_accuracy=new_acc,
                rolled_back=rolled_back,
            )
        records.append(record)
        if on_window is not None:
            on_window(record)
    ray.kill(service)
    return LoopResult(config, tuple(records), tuple(updates), golden_last, registry_dir)
