"""A drifting table: scikit-learn's breast-cancer data as hourly windows (no download).

Rows
----
Each window is one hour of ``rows_per_window`` rows drawn without replacement from the 569
rows of :func:`sklearn.datasets.load_breast_cancer` (30 numeric measurements of a cell
nucleus image), with a ``time`` column (ISO 8601, one row every few seconds of its hour),
a ``scanner`` column (the categorical site the row comes from: ``A``, ``B``, ``C``) and the
``diagnosis`` label as text (``benign``, ``malignant``).

Drift
-----
Window ``t`` has the severity ``s(t) = clip((t - onset_window) / ramp_windows, 0, 1)`` of
:mod:`deepedge.learning.stream`. A recalibrated imaging line scales the size measurements
(every radius, perimeter and area column, mean and worst) by ``1 + s * size_gain``, shifts
the texture columns by ``s * texture_shift`` and adds noise of ``s * noise_frac`` of each
column's spread; from severity 0.5 on, a new scanner ``D`` sends a share ``s / 2`` of the
rows. Window ``t`` is generated from ``numpy.random.default_rng([seed, t])``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.core.errors import InvalidInputError

LABEL, TIME, SCANNER = "diagnosis", "time", "scanner"
SIZE_WORDS = ("radius", "perimeter", "area")
START = np.datetime64("2026-11-25T00:00:00")


@dataclass(frozen=True)
class TableDriftConfig:
    seed: int = 0
    windows: int = 8
    rows_per_window: int = 200
    onset_window: int = 2  # the last window with no drift
    ramp_windows: int = 2
    size_gain: float = 0.6
    texture_shift: float = 6.0
    noise_frac: float = 0.15

    def __post_init__(self) -> None:
        if self.windows < 1 or not 10 <= self.rows_per_window <= 569:
            raise InvalidInputError(
                "need windows >= 1 and 10 <= rows_per_window <= 569", field="rows_per_window"
            )
        if self.ramp_windows < 1:
            raise InvalidInputError("ramp_windows must be >= 1", field="ramp_windows")

    def severity(self, t: int) -> float:
        return float(np.clip((t - self.onset_window) / self.ramp_windows, 0.0, 1.0))


@functools.lru_cache(maxsize=1)
def _source() -> tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    return (
        np.asarray(data.data, dtype=np.float64),
        np.asarray(data.target, dtype=np.int64),
        tuple(str(n) for n in data.feature_names),
        tuple(str(n) for n in data.target_names),
    )


def drifting_cancer_table(**kwargs: Any) -> Any:
    """The whole drifting table as one pandas DataFrame (a workload's table entry point);
    ``kwargs`` are :class:`TableDriftConfig`'s fields."""
    import pandas as pd

    config = TableDriftConfig(**kwargs)
    x, y, features, classes = _source()
    spread = x.std(axis=0)
    size = np.array([any(w in f for w in SIZE_WORDS) for f in features])
    texture = np.array(["texture" in f for f in features])
    frames = []
    for t in range(config.windows):
        rng = np.random.default_rng([config.seed, t])
        s = config.severity(t)
        rows = rng.choice(len(y), config.rows_per_window, replace=False)
        values = x[rows].copy()
        values[:, size] *= 1.0 + s * config.size_gain
        values[:, texture] += s * config.texture_shift
        values += rng.normal(0.0, 1.0, values.shape) * (s * config.noise_frac * spread)
        scanners = rng.choice(["A", "B", "C"], len(rows))
        if s >= 0.5:
            scanners = np.where(rng.random(len(rows)) < s / 2, "D", scanners)
        seconds = np.sort(rng.uniform(0, 3600, len(rows))).astype("timedelta64[s]")
        stamps = START + np.timedelta64(3600 * t, "s") + seconds
        frame = pd.DataFrame(values, columns=list(features))
        frame.insert(0, SCANNER, scanners)
        frame.insert(0, TIME, [str(v) for v in stamps])
        frame[LABEL] = [classes[k] for k in y[rows]]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def write_hourly_csv(frame: Any, folder: Path) -> list[Path]:
    """One CSV file per hour of ``frame``'s ``time`` column (``YYYY-MM-DDTHH.csv``), as a
    site would collect them; returns the files in time order."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    hours = pd.to_datetime(frame[TIME]).dt.strftime("%Y-%m-%dT%H")
    paths = []
    for hour, rows in frame.groupby(hours, sort=True):
        path = folder / f"{hour}.csv"
        rows.to_csv(path, index=False)
        paths.append(path)
    return paths
