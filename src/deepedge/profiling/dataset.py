"""The profiling dataset: one row per measurement window, with a column schema and provenance.

A row records, for one stress point and one repeat,

* the controlled knobs: stress levels, the worker's batch size ``b``, ``|W|`` and the batch
  distribution's mean;
* the measured node states (95th percentiles, :mod:`deepedge.cluster.metrics`):
  ``init_*`` before the update task starts (X^initial), ``new_*`` while it runs (X^new),
  ``ps_*`` of the parameter server (the same host for the loopback server);
* the measured targets: ``t_compute_s`` (per sample), ``t_update_s`` (per iteration) and
  the SIFT app's frame execution time ``exec_time_s`` (median over the window).

GPU columns are NaN on a host without a GPU (absent, not 0). Files: ``profile.parquet``
(or ``profile.csv``) plus ``profile.provenance.json``; the Parquet file also carries the
provenance in its metadata.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from deepedge.core.errors import InvalidInputError

log = logging.getLogger(__name__)

PARQUET_NAME = "profile.parquet"
CSV_NAME = "profile.csv"
PROVENANCE_NAME = "profile.provenance.json"
_PARQUET_META_KEY = b"deepedge.provenance"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    dtype: str  # pandas dtype: "int64", "float64" or "string"
    unit: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("device", "string", "", "profiled device type"),
    Column("config_id", "int64", "", "stress point x batch size x workers; repeats share it"),
    Column("repeat", "int64", "", "the sweep pass that measured this row"),
    Column("stress_cpu", "float64", "fraction", "stressor CPU load target per core"),
    Column("stress_mem_mb", "int64", "MiB", "stressor resident memory target"),
    Column("stress_io", "int64", "workers", "stressor disk writers"),
    Column("stress_gpu", "float64", "fraction", "stressor GPU duty cycle"),
    Column("batch_size", "int64", "samples", "the profiled worker's batch size b_i"),
    Column("n_workers", "int64", "workers", "|W|, the profiled worker plus emulated peers"),
    Column("batch_mean", "float64", "samples", "mean of the batch distribution B"),
    Column(
        "init_cpu", "float64", "fraction", "X^initial cpu (P95) at the level visit, before the task"
    ),
    Column("init_mem", "float64", "fraction", "X^initial mem (P95)"),
    Column("init_gpu", "float64", "fraction", "X^initial gpu (P95); NaN without a GPU"),
    Column("new_cpu", "float64", "fraction", "X^new cpu (P95) while the update task runs"),
    Column("new_mem", "float64", "fraction", "X^new mem (P95)"),
    Column("new_gpu", "float64", "fraction", "X^new gpu (P95); NaN without a GPU"),
    Column("ps_cpu", "float64", "fraction", "parameter server cpu (P95) before the task"),
    Column("ps_mem", "float64", "fraction", "parameter server mem (P95)"),
    Column("ps_gpu", "float64", "fraction", "parameter server gpu (P95); NaN without a GPU"),
    Column("t_compute_s", "float64", "s/sample", "mean step compute time / b, warm-up excluded"),
    Column("t_update_s", "float64", "s/iteration", "mean push + update + pull time"),
    Column("t_update_server_s", "float64", "s/iteration", "mean server-side update time"),
    Column("n_steps", "int64", "steps", "training steps averaged (the warm-up step excluded)"),
    Column("exec_time_s", "float64", "s", "SIFT frame execution time, median over the window"),
    Column("exec_mean_s", "float64", "s", "SIFT frame execution time, mean"),
    Column("exec_p95_s", "float64", "s", "SIFT frame execution time, 95th percentile"),
    Column("n_frames", "int64", "frames", "SIFT frames in the window"),
    Column("miss_frac", "float64", "fraction", "SIFT frames that missed their deadline"),
    Column("t_offset_s", "float64", "s", "window start, seconds since the sweep began"),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


class Provenance(BaseModel):
    """Where, when and with what a profile was measured."""

    model_config = ConfigDict(frozen=True)

    device: str
    host: str
    cores: int = Field(ge=1)
    mem_total_mb: float = Field(gt=0)
    cpu_model: str
    gpu_name: str | None = None
    started_utc: str
    finished_utc: str
    duration_s: float = Field(ge=0)
    backend: str
    cpu_scope: str = "system"  # whose CPU use the node states count (system or tree)
    stress_ng_version: str | None = None
    versions: dict[str, str]
    workload: str
    n_params: int = Field(ge=0)
    sweep: dict[str, Any]
    truncated: bool = False  # the sweep stopped at its time budget before all points


@dataclass(frozen=True)
class ProfileDataset:
    frame: pd.DataFrame
    provenance: Provenance

    @property
    def has_gpu(self) -> bool:
        return bool(self.frame["init_gpu"].notna().all()) and len(self.frame) > 0


def conform(frame: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Check the columns and cast to the schema's dtypes; missing columns are bad input."""
    missing = [c for c in COLUMN_NAMES if c not in frame.columns]
    if missing:
        shown = ", ".join(missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        raise InvalidInputError(f"{source} lacks columns: {shown}", field=missing[0])
    out = frame.loc[:, list(COLUMN_NAMES)].copy()
    for column in COLUMNS:
        try:
            out[column.name] = out[column.name].astype(column.dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"{source} column {column.name} is not {column.dtype}: {exc}", field=column.name
            ) from exc
    return out.reset_index(drop=True)


def write_dataset(dataset: ProfileDataset, out_dir: Path, fmt: str = "parquet") -> Path:
    """Write the rows and the provenance into ``out_dir``; returns the data file's path."""
    try:
        return _write(dataset, out_dir, fmt)
    except OSError as exc:
        raise InvalidInputError(f"cannot write the dataset to {out_dir}: {exc}", "out") from exc


def _write(dataset: ProfileDataset, out_dir: Path, fmt: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = conform(dataset.frame)
    provenance_json = dataset.provenance.model_dump_json(indent=2)
    (out_dir / PROVENANCE_NAME).write_text(provenance_json + "\n")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        meta = dict(table.schema.metadata or {})
        meta[_PARQUET_META_KEY] = provenance_json.encode()
        path = out_dir / PARQUET_NAME
        pq.write_table(table.replace_schema_metadata(meta), path)
    elif fmt == "csv":
        path = out_dir / CSV_NAME
        frame.to_csv(path, index=False)
    else:
        raise InvalidInputError(f"unknown dataset format {fmt!r} (parquet, csv)", field="format")
    log.info("wrote %d rows to %s", len(frame), path)
    return path


def _data_file(path: Path) -> Path:
    if path.is_dir():
        for name in (PARQUET_NAME, CSV_NAME):
            if (path / name).is_file():
                return path / name
        raise InvalidInputError(f"{path} holds no {PARQUET_NAME} or {CSV_NAME}", field=str(path))
    if not path.is_file():
        raise InvalidInputError(f"dataset {path} does not exist", field=str(path))
    return path


def read_dataset(path: Path) -> ProfileDataset:
    """Read a dataset written by :func:`write_dataset` (a directory or the data file)."""
    data_file = _data_file(path)
    provenance_raw: str | None = None
    try:
        if data_file.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(data_file)
            raw = (table.schema.metadata or {}).get(_PARQUET_META_KEY)
            provenance_raw = raw.decode() if raw else None
            frame = table.to_pandas()
        elif data_file.suffix == ".csv":
            frame = pd.read_csv(data_file)
        else:
            raise InvalidInputError(f"{data_file} is neither .parquet nor .csv", field=str(path))
    except InvalidInputError:
        raise
    except Exception as exc:
        raise InvalidInputError(f"cannot read dataset {data_file}: {exc}", field=str(path)) from exc
    frame = conform(frame, str(data_file))
    sidecar = data_file.parent / PROVENANCE_NAME
    if provenance_raw is None and sidecar.is_file():
        provenance_raw = sidecar.read_text()
    if provenance_raw is None:
        raise InvalidInputError(
            f"{data_file} has no provenance ({PROVENANCE_NAME})", field="provenance"
        )
    try:
        provenance = Provenance.model_validate(json.loads(provenance_raw))
    except Exception as exc:
        raise InvalidInputError(
            f"invalid provenance of {data_file}: {exc}", field="provenance"
        ) from exc
    return ProfileDataset(frame, provenance)


def column_schema() -> dict[str, Any]:
    """The dataset's columns as a JSON Schema of one row (for docs/schemas)."""
    json_type = {"int64": "integer", "float64": "number", "string": "string"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "ProfileRow",
        "description": "One measurement window of a deepedge profile (profile.parquet/.csv).",
        "type": "object",
        "properties": {
            c.name: {
                "type": [json_type[c.dtype], "null"]
                if c.name.endswith("_gpu")
                else json_type[c.dtype],
                "description": f"{c.doc}" + (f" [{c.unit}]" if c.unit else ""),
            }
            for c in COLUMNS
        },
        "required": list(COLUMN_NAMES),
    }
