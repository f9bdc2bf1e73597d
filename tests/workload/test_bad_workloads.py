"""Bad workloads are refused with exit status 2, naming the field, before Ray starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
import torch
from typer.testing import CliRunner

from _workload_helpers import write_workload
from deepedge.cli import app

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.json")
runner = CliRunner()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"model": {"entry_point": "mysite.models:make", "kwargs": {"fail": True}}}, "model"),
        ({"frozen": {"prefixes": ["backbone"]}}, "frozen.prefixes"),
        ({"input": {"size": [12, 12], "channels": 1}}, "input"),
        ({"data": {"kind": "folder", "root": "nowhere"}}, "data.root"),
    ],
)
def test_a_bad_workload_exits_2_before_ray(tmp_path: Path, override: dict, field: str) -> None:
    import ray

    path = write_workload(tmp_path, **override)
    result = runner.invoke(app, ["update", "--workload", str(path), "--cluster", CLUSTER])
    assert result.exit_code == 2, result.output
    # One error line, last (after the progress note that the workload was being loaded).
    lines = result.output.splitlines()
    assert lines[-1].startswith(f"error: {field}") and result.output.count("error:") == 1
    assert not ray.is_initialized()


def test_ekya_refuses_more_windows_than_the_data_has(tmp_path: Path) -> None:
    path = write_workload(tmp_path)
    result = runner.invoke(app, ["ekya", "--workload", str(path), "--windows", "3"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: windows: the workload has 3 windows, 4 needed")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--windows", "4"], "windows: the workload has 3 windows"),
        (["--image-folder", "x"], "give --workload or --image-folder"),
    ],
)
def test_demo_refuses_a_workload_it_cannot_run(
    tmp_path: Path, extra: list[str], field: str
) -> None:
    import ray

    path = write_workload(tmp_path)
    out = ["--out", str(tmp_path / "demo")]
    result = runner.invoke(app, ["demo", "--workload", str(path), *out, *extra])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {field}")
    assert not ray.is_initialized()


def _flat_of_another_model(path: Path) -> str:
    import numpy as np

    np.save(path / "w.npy", np.zeros(7, dtype=np.float32))
    return "expected 146 weights, got shape (7,)"


def _state_of_another_model(path: Path) -> str:
    torch.save(torch.nn.Linear(3, 2).state_dict(), path / "w.npy")
    return "the state does not match the model"


def _a_pickle_of_objects(path: Path) -> str:
    torch.save({"model": object()}, path / "w.npy")
    return "is not a state_dict of tensors"


def _not_a_model_file(path: Path) -> str:
    (path / "w.npy").write_text("weights")
    return "is neither a torch.save / torch.jit.save file nor a .npy"


@pytest.mark.parametrize(
    "make", [_flat_of_another_model, _state_of_another_model, _a_pickle_of_objects,
             _not_a_model_file],
)  # fmt: skip
def test_update_refuses_weights_of_another_model(tmp_path: Path, make: Any) -> None:
    path = write_workload(tmp_path)
    expected = make(tmp_path)
    args = ["update", "--workload", str(path), "--cluster", CLUSTER]
    result = runner.invoke(app, [*args, "--weights", str(tmp_path / "w.npy")])
    assert result.exit_code == 2, result.output
    last = result.output.splitlines()[-1]
    assert last.startswith("error: --weights:") and expected in last, result.output
    assert not ray.is_initialized()


def test_workload_check_prints_the_summary_or_names_the_field(tmp_path: Path) -> None:
    import json

    good = runner.invoke(app, ["workload", "check", str(write_workload(tmp_path))])
    assert good.exit_code == 0, good.output
    summary = json.loads(good.stdout)
    assert (summary["classes"], summary["trainable_parameters"], summary["windows"]) == (
        ["blue", "red"],
        34,
        3,
    )
    bad = runner.invoke(app, ["workload", "check", str(write_workload(tmp_path, seed="x"))])
    assert bad.exit_code == 2 and bad.output.startswith("error: seed: ")
