"""Profile dataset: schema round trip (Parquet and CSV), bad input, committed JSON Schemas."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deepedge.cli.profile import SCHEMAS, write_schemas
from deepedge.core.errors import InvalidInputError
from deepedge.profiling.dataset import (
    COLUMN_NAMES,
    PROVENANCE_NAME,
    ProfileDataset,
    read_dataset,
    write_dataset,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "perfmodel"))
from _learned_cases import synthetic_dataset

SCHEMA_DIR = Path(__file__).parents[2] / "docs" / "schemas"


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_round_trip(tmp_path, fmt):
    original = synthetic_dataset(n_configs=5)
    path = write_dataset(original, tmp_path, fmt)
    back = read_dataset(tmp_path)
    assert path.suffix == f".{fmt}"
    assert list(back.frame.columns) == list(COLUMN_NAMES)
    pd.testing.assert_frame_equal(back.frame, original.frame.astype(back.frame.dtypes.to_dict()))
    assert back.frame["init_gpu"].isna().all()  # absent GPU stays absent
    assert back.provenance == original.provenance
    assert read_dataset(path).provenance == original.provenance  # the file path works too


def test_parquet_carries_provenance_without_sidecar(tmp_path):
    write_dataset(synthetic_dataset(n_configs=3), tmp_path)
    (tmp_path / PROVENANCE_NAME).unlink()
    assert read_dataset(tmp_path).provenance.device == "synthetic-host"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.drop(columns=["t_compute_s"]), "lacks columns: t_compute_s"),
        (lambda f: f.assign(batch_size="big"), "batch_size"),
    ],
)
def test_bad_datasets(tmp_path, mutate, message):
    dataset = synthetic_dataset(n_configs=3)
    write_dataset(dataset, tmp_path, "csv")
    mutate(dataset.frame).to_csv(tmp_path / "profile.csv", index=False)
    with pytest.raises(InvalidInputError, match=message):
        read_dataset(tmp_path)


def test_unreadable_and_missing(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        read_dataset(tmp_path / "nope.parquet")
    with pytest.raises(InvalidInputError, match="holds no"):
        read_dataset(tmp_path)
    (tmp_path / "profile.parquet").write_bytes(b"not parquet")
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_dataset(tmp_path)


def test_dataset_reports_gpu_presence():
    frame = synthetic_dataset(n_configs=3).frame
    assert not ProfileDataset(frame, synthetic_dataset(n_configs=3).provenance).has_gpu
    with_gpu = frame.assign(init_gpu=0.5, new_gpu=0.6, ps_gpu=0.5)
    assert ProfileDataset(with_gpu, synthetic_dataset(n_configs=3).provenance).has_gpu
    assert np.isfinite(with_gpu["init_gpu"]).all()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schemas_are_current(tmp_path, name):
    write_schemas(tmp_path)
    assert json.loads((SCHEMA_DIR / name).read_text()) == json.loads((tmp_path / name).read_text())
