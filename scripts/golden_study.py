#!/usr/bin/env python
"""How good golden ensembles of other sizes are on the accuracy benchmark's digits trace,
and what they cost to train (one thread).

The ensemble is trained as the site trains it (:mod:`deepedge.controlplane.golden_labeller`):
on the augmented pool of the deployment's stream, which :meth:`Site.stream` builds from the
benchmark's ``digits`` spec (its seed and transforms), with ``GOLDEN_TRAINING``. It is scored
on every scene of the trace (``drift_trace``: +1, the gradual ramp's +0.67 ... -0.67, -1 and
0), each on ``--samples`` images of the scheduled stream the camera sends, drawn from
windows ``EVAL_OFFSET`` on: neither the camera's windows (0 on), nor the offline
reference's (``FRESH_OFFSET`` on), nor the pool (its own generator) drew them.

A setting is ``POOL:EPOCHS:MEMBERS:WIDTH`` (``GoldenCNN``'s width); without any, the
study's list (:data:`STUDY`, about 16 minutes). Prints one line per setting as it ends,
then a table.

    python scripts/golden_study.py                       # the study's settings
    python scripts/golden_study.py 24000:8:2:16 24000:8:2:24
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from deepedge.bench.accuracy import FRESH_OFFSET, SCALES, SEED, digits
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.golden_labeller import (
    GOLDEN_EPOCHS,
    GOLDEN_MEMBERS,
    GOLDEN_POOL,
    GOLDEN_TRAINING,
)
from deepedge.controlplane.site import Site
from deepedge.learning.models import GoldenModel
from deepedge.learning.scheduled_stream import ScheduledStream
from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images
from deepedge.learning.training import predict, train_epochs

EVAL_OFFSET = 2 * FRESH_OFFSET  # the scored windows: past the camera's and the reference's


@dataclass(frozen=True)
class Setting:
    pool: int
    epochs: int
    members: int
    width: int

    @classmethod
    def parse(cls, text: str) -> Setting:
        pool, epochs, members, width = (int(p) for p in text.split(":"))
        return cls(pool, epochs, members, width)

    def __str__(self) -> str:
        return f"{self.pool}:{self.epochs}:{self.members}:{self.width}"


SITE = Setting(GOLDEN_POOL, GOLDEN_EPOCHS, GOLDEN_MEMBERS, 16)  # GoldenCNN's default width
# The study that chose SITE: from the former 24000:8:2:16, one factor at a time (width,
# members, epochs, pool), then the pool's gains combined with fewer members or more epochs.
STUDY = tuple(
    Setting.parse(s)
    for s in ("24000:8:2:16", "24000:8:2:24", "24000:8:2:32", "24000:8:3:16", "24000:12:2:16",
              "36000:8:2:16", "36000:12:2:16", "48000:8:2:16", "48000:8:1:16", "72000:8:1:16",
              "96000:8:1:16")
)  # fmt: skip


def site_stream() -> DriftingStream:
    """The golden labeller's stream of the benchmark's digits deployment, built by a site."""
    spec = DeploymentSpec.model_validate(digits(SCALES.full).spec)
    with tempfile.TemporaryDirectory() as root:
        return Site(Path(root)).stream(spec)


def scene_samples(samples: int) -> dict[float, tuple[np.ndarray, np.ndarray]]:
    """``samples`` (or a few more: whole windows) images and true labels of each of the
    trace's scenes, from the camera's scheduled stream at windows ``EVAL_OFFSET`` on."""
    settings = SCALES.full
    scenes = sorted(set(settings.trace().scenes), reverse=True)
    per_scene = math.ceil(samples / settings.per_window)
    schedule = [0.0] * EVAL_OFFSET + [s for s in scenes for _ in range(per_scene)]
    stream = ScheduledStream(
        load_digits_images(16),
        DriftConfig(seed=SEED, window_size=settings.per_window, eval_size=1),
        schedule,
    )
    out = {}
    for k, scene in enumerate(scenes):
        windows = [stream.window(EVAL_OFFSET + k * per_scene + j) for j in range(per_scene)]
        out[scene] = (
            np.concatenate([w.images for w in windows]),
            np.concatenate([w.labels for w in windows]),
        )
    return out


def train(stream: DriftingStream, x: np.ndarray, y: np.ndarray, s: Setting) -> GoldenModel:
    """As ``train_golden`` trains the site's ensemble, with ``s``'s width and sizes."""
    seed = stream.config.seed
    torch.manual_seed(seed)
    golden = GoldenModel(stream.n_classes, stream.image_size, s.members, s.width)
    for i, member in enumerate(golden.members):
        train_epochs(member, x, y, s.epochs, GOLDEN_TRAINING, seed=seed + 101 * i)
    return golden.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="*", type=Setting.parse, help="POOL:EPOCHS:MEMBERS:WIDTH")
    parser.add_argument("--samples", type=int, default=2400, help="scored images per scene")
    args = parser.parse_args()
    stream = site_stream()
    torch.set_num_threads(1)
    tests = scene_samples(args.samples)
    warm_x, warm_y = stream.augmented_pool(256, seed=stream.config.seed)
    train(stream, warm_x, warm_y, Setting(256, 1, 1, SITE.width))  # the first call's setup
    pools: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
    rows = []
    for setting in args.settings or STUDY:
        if setting.pool not in pools:
            started = time.perf_counter()
            x, y = stream.augmented_pool(setting.pool, seed=stream.config.seed)
            pools[setting.pool] = (x, y, time.perf_counter() - started)
        x, y, pool_s = pools[setting.pool]
        started, cpu_started = time.perf_counter(), time.process_time()
        golden = train(stream, x, y, setting)
        train_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        scores = {s: float(np.mean(predict(golden, xs) == ys)) for s, (xs, ys) in tests.items()}
        rows.append((setting, pool_s, train_s, cpu_s, scores))
        print(f"{setting}: pool {pool_s:.1f} s, train {train_s:.1f} s ({cpu_s:.1f} s CPU), "
              + ", ".join(f"{s:+.2f} {a:.4f}" for s, a in scores.items()), flush=True)  # fmt: skip
    n = len(next(iter(tests.values()))[1])
    print(f"\nsetting: pool:epochs:members:width; seconds of wall time (and of CPU) on one "
          f"thread; accuracy per scene, {n} images each")  # fmt: skip
    print("|".join(["setting", "pool s", "train s", "CPU s", *(f"{s:+.2f}" for s in tests)]))
    for setting, pool_s, train_s, cpu_s, scores in rows:
        name = f"{setting} (the site's)" if setting == SITE else str(setting)
        cells = [name, f"{pool_s:.1f}", f"{train_s:.1f}", f"{cpu_s:.1f}"]
        print("|".join(cells + [f"{a:.4f}" for a in scores.values()]))


if __name__ == "__main__":
    main()
