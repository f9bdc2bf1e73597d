"""Tabular windows: rows of feature columns, read with pandas and encoded for a model.

A :class:`TableSource` reads the rows of a :class:`~deepedge.workload.spec.TableData` once
(a CSV or Parquet file, a folder of them in name order, or a DataFrame an entry point
returns), orders them by their timestamp (seconds, or a date and time) and cuts them into
windows of ``window_s`` seconds from the first one (empty windows are skipped). A window's
rows become ``(N, F)`` float32 vectors:

* a numeric column ``x`` is normalised with statistics of the first ``fit_windows``
  windows: ``(x - mean) / std`` (``standard``), ``(x - min) / (max - min)`` (``minmax``),
  or kept (``none``); a constant column divides by 1;
* a categorical column becomes a one-hot block over the categories seen in the fitting
  windows, plus one slot for any other category.

Labels are class names: the label column's values as text, or integers, mapped through
the workload's ``classes`` (default: the values found, in numeric order for integers,
else in text order). A row with no label (empty) is left for the labeller (``-1``).

A bad row (a numeric column that is not a finite number, a label that is not a class, a
timestamp that does not parse) is skipped and counted with the row and the reason
(:class:`~deepedge.workload.samples.BadSample`); a window with more than
``max_bad_fraction`` bad rows fails, naming the first.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.core.errors import InvalidInputError
from deepedge.workload.samples import BadSample, check_bad_fraction
from deepedge.workload.sources import NO_LABEL, WindowData, split_eval
from deepedge.workload.spec import FeatureColumn, TableData

log = logging.getLogger(__name__)

TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_ROW = "__deepedge_row__"  # where a row came from, for messages
_OTHER = "(other)"


def read_frame(data: TableData, base_dir: Path, python_path: Sequence[Path] = ()) -> Any:
    """The table's rows as one pandas DataFrame with a ``where`` column for messages."""
    import pandas as pd

    if data.entry_point is not None:
        from deepedge.workload.model import import_entry_point

        factory = import_entry_point(data.entry_point, "data.entry_point", python_path)
        try:
            frame = factory(**data.kwargs)
        except Exception as exc:
            raise InvalidInputError(
                f"data.entry_point: {data.entry_point}(**kwargs) raised "
                f"{type(exc).__name__}: {exc}",
                field="data.entry_point",
            ) from exc
        if not isinstance(frame, pd.DataFrame):
            raise InvalidInputError(
                f"data.entry_point: returned {type(frame).__name__}, not a pandas DataFrame",
                field="data.entry_point",
            )
        frame = frame.reset_index(drop=True)
        frame[_ROW] = [f"row {i}" for i in range(len(frame))]
        return frame
    assert data.path is not None
    path = data.path if data.path.is_absolute() else base_dir / data.path
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in TABLE_SUFFIXES)
        if not files:
            raise InvalidInputError(
                f"data.path: {path} holds no .csv or .parquet file", field="data.path"
            )
    elif path.is_file():
        files = [path]
    else:
        raise InvalidInputError(f"data.path: {path} does not exist", field="data.path")
    frames = [_read_file(f) for f in files]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _read_file(path: Path) -> Any:
    import pandas as pd

    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InvalidInputError(
            f"data.path: {path} is neither .csv nor .parquet", field="data.path"
        )
    try:
        # Every CSV cell as text: the encoder parses numbers itself and names a bad cell.
        frame = (
            pd.read_csv(path, dtype=str, keep_default_na=False)
            if kind == "csv"
            else pd.read_parquet(path)
        )
    except Exception as exc:  # unreadable, not UTF-8, not Parquet: bad input
        raise InvalidInputError(
            f"data.path: cannot read {path}: {type(exc).__name__}: {exc}", field="data.path"
        ) from exc
    frame[_ROW] = [f"{path.name} line {i + 2}" if kind == "csv" else f"{path.name} row {i}"
                   for i in range(len(frame))]  # fmt: skip
    return frame


def _columns(frame: Any, data: TableData) -> list[FeatureColumn]:
    """The feature columns: declared (each must exist), else every other column typed by
    whether its values parse as numbers."""
    import pandas as pd

    present = [c for c in frame.columns if c != _ROW]
    for name, field in ((data.label, "data.label"), (data.timestamp, "data.timestamp")):
        if name not in present:
            raise InvalidInputError(
                f"{field}: the table has no column {name!r} (columns: {present[:12]})",
                field=field,
            )
    if data.features is not None:
        missing = [c.name for c in data.features if c.name not in present]
        if missing:
            raise InvalidInputError(
                f"data.features: the table has no column(s) {missing[:5]} "
                f"(columns: {present[:12]})",
                field="data.features",
            )
        return list(data.features)
    out = []
    for name in present:
        if name in {data.label, data.timestamp}:
            continue
        values = pd.to_numeric(frame[name].replace("", np.nan), errors="coerce")
        share = float(values.notna().mean()) if len(values) else 0.0
        out.append(FeatureColumn(name=str(name), type="numeric" if share >= 0.9 else "categorical"))
    if not out:
        raise InvalidInputError("data.features: the table has no feature column", field="data")
    return out


def _timestamps(values: Any) -> np.ndarray:
    """Seconds (float) of each timestamp; NaN where it parses neither as a number nor as a
    date and time."""
    import pandas as pd

    text = values.astype(str).str.strip()
    seconds = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
    if np.isnan(seconds).any():
        dates = pd.to_datetime(text, errors="coerce", utc=True, format="mixed")
        as_seconds = (dates - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=float)
        seconds = np.where(np.isnan(seconds), as_seconds, seconds)
    return seconds


def _label_texts(values: Any) -> list[str]:
    out = []
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append("")
            continue
        text = str(v).strip()
        if isinstance(v, float | np.floating) and float(v).is_integer():
            text = str(int(v))  # 1.0 in a Parquet float column is the class "1"
        out.append(text)
    return out


def _class_names(labels: list[str], declared: list[str] | None) -> tuple[str, ...]:
    if declared is not None:
        return tuple(declared)
    found = sorted(set(labels) - {""})
    if found and all(_is_int(x) for x in found):
        found.sort(key=int)
    if len(found) < 2:
        raise InvalidInputError(
            f"classes: the label column holds {len(found)} class(es); need at least 2",
            field="classes",
        )
    return tuple(found)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ColumnCode:
    """How one column is encoded: its slots in the vector and the fitted statistics."""

    column: FeatureColumn
    offset: float = 0.0  # numeric: subtracted
    scale: float = 1.0  # numeric: divided by
    categories: tuple[str, ...] = ()  # categorical: one slot each, then one for any other

    @property
    def width(self) -> int:
        return 1 if self.column.type == "numeric" else len(self.categories) + 1

    def names(self) -> list[str]:
        if self.column.type == "numeric":
            return [self.column.name]
        return [f"{self.column.name}={c}" for c in (*self.categories, _OTHER)]


class TableSource:
    """Windows of a table's rows (module docstring)."""

    def __init__(
        self,
        data: TableData,
        seed: int,
        declared: list[str] | None,
        base_dir: Path,
        python_path: Sequence[Path] = (),
    ) -> None:
        frame = read_frame(data, base_dir, python_path)
        if len(frame) == 0:
            raise InvalidInputError("data: the table has no row", field="data")
        self.data = data
        self.seed = seed
        self.columns = _columns(frame, data)
        seconds = _timestamps(frame[data.timestamp])
        bad_time = np.isnan(seconds)
        self.unstamped = [
            BadSample(str(w), f"timestamp {t!r} is neither seconds nor a date")
            for w, t in zip(frame[_ROW][bad_time], frame[data.timestamp][bad_time], strict=True)
        ]
        if bad_time.all():
            raise InvalidInputError(
                f"data.timestamp: no value of column {data.timestamp!r} is a time "
                f"(first: {self.unstamped[0].where}: {self.unstamped[0].reason})",
                field="data.timestamp",
            )
        frame = frame[~bad_time].copy()
        frame["__seconds__"] = seconds[~bad_time]
        frame = frame.sort_values("__seconds__", kind="stable").reset_index(drop=True)
        labels = _label_texts(frame[data.label])
        self.class_names = _class_names(labels, declared)
        index = {c: i for i, c in enumerate(self.class_names)}
        frame["__label__"] = labels
        buckets = np.floor((frame["__seconds__"] - frame["__seconds__"].iloc[0]) / data.window_s)
        frame["__window__"] = buckets.astype(np.int64)
        self.frame = frame
        self.label_index = index
        self.windows = [(f"w{int(k)}", rows.index.to_numpy())
                        for k, rows in frame.groupby("__window__", sort=True)]  # fmt: skip
        self.n_windows: int | None = len(self.windows)
        fit_rows = np.concatenate([rows for _, rows in self.windows[: data.fit_windows]])
        self.codes = [self._fit(c, frame.loc[fit_rows]) for c in self.columns]
        self.feature_names = [n for code in self.codes for n in code.names()]

    @property
    def n_features(self) -> int:
        return sum(code.width for code in self.codes)

    def _fit(self, column: FeatureColumn, rows: Any) -> ColumnCode:
        import pandas as pd

        if column.type == "categorical":
            cats = sorted({str(v).strip() for v in rows[column.name]} - {""})
            return ColumnCode(column, categories=tuple(cats))
        values = pd.to_numeric(rows[column.name], errors="coerce").to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if len(values) == 0:
            raise InvalidInputError(
                f"data.features: column {column.name!r} has no number in the fitting windows "
                "(declare it categorical)",
                field="data.features",
            )
        kind = self.data.normalise
        if kind == "standard":
            std = float(values.std())
            return ColumnCode(column, float(values.mean()), std if std > 1e-12 else 1.0)
        if kind == "minmax":
            span = float(values.max() - values.min())
            return ColumnCode(column, float(values.min()), span if span > 1e-12 else 1.0)
        return ColumnCode(column)

    def _encode(self, rows: Any) -> tuple[np.ndarray, list[BadSample], np.ndarray]:
        """(features of the good rows, the bad rows, which rows are good)."""
        import pandas as pd

        n = len(rows)
        out = np.zeros((n, self.n_features), dtype=np.float32)
        good = np.ones(n, dtype=bool)
        bad: list[BadSample] = []
        where = rows[_ROW].to_numpy()
        slot = 0
        for code in self.codes:
            raw = rows[code.column.name]
            if code.column.type == "numeric":
                values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
                broken = ~np.isfinite(values)
                for i in np.flatnonzero(broken & good):
                    bad.append(BadSample(str(where[i]), f"column {code.column.name!r} is "
                                         f"{raw.iloc[i]!r}, not a number"))  # fmt: skip
                good &= ~broken
                out[:, slot] = np.where(broken, 0.0, (values - code.offset) / code.scale)
            else:
                position = {c: k for k, c in enumerate(code.categories)}
                other = len(code.categories)
                for row, v in enumerate(raw):
                    out[row, slot + position.get(str(v).strip(), other)] = 1.0
            slot += code.width
        return out, bad, good

    def window(self, t: int) -> WindowData:
        if not 0 <= t < len(self.windows):
            raise InvalidInputError(
                f"window {t} does not exist: the data has {len(self.windows)} windows",
                field="window",
            )
        name, row_index = self.windows[t]
        rows = self.frame.loc[row_index]
        features, bad, good = self._encode(rows)
        labels = np.full(len(rows), NO_LABEL, dtype=np.int64)
        for i, (text, where) in enumerate(zip(rows["__label__"], rows[_ROW], strict=True)):
            if text == "":
                continue
            if text not in self.label_index:
                if good[i]:
                    bad.append(BadSample(str(where), f"label {text!r} is not one of the "
                                         f"classes {list(self.class_names)[:6]}"))  # fmt: skip
                good[i] = False
                continue
            labels[i] = self.label_index[text]
        if t == 0:
            bad = [*self.unstamped, *bad]
        check_bad_fraction(name, len(rows) + (len(self.unstamped) if t == 0 else 0), bad,
                           self.data.max_bad_fraction)  # fmt: skip
        features, labels = features[good], labels[good]
        rng = np.random.default_rng([self.seed, t])
        stream_idx, eval_idx = split_eval(len(labels), self.data.eval_fraction, rng)
        return WindowData(
            index=t,
            name=name,
            images=features[stream_idx],
            labels=labels[stream_idx],
            eval_images=features[eval_idx],
            eval_labels=labels[eval_idx],
            skipped=tuple(bad),
        )

    def fitted(self) -> list[dict[str, Any]]:
        """The encoding of each column (what ``workload check`` shows)."""
        return [
            {"column": c.column.name, "type": c.column.type,
             **({"offset": c.offset, "scale": c.scale} if c.column.type == "numeric"
                else {"categories": list(c.categories)})}
            for c in self.codes
        ]  # fmt: skip
