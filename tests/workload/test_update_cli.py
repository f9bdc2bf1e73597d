"""``deepedge update --workload FILE --cluster FILE``: a user's workload end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from _workload_helpers import write_workload
from deepedge.cli import app
from deepedge.learning.models import set_flat_weights
from deepedge.workload.resolve import load_workload

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
    assert result.output.startswith(f"error: {field}")
    assert not ray.is_initialized()


@pytest.mark.slow
@pytest.mark.ray
def test_update_trains_a_user_model_on_its_own_images(tmp_path: Path, ray_cluster: None) -> None:
    path = write_workload(tmp_path, frozen={"prefixes": []})
    out = tmp_path / "out"
    args = ["update", "--workload", str(path), "--cluster", CLUSTER, "--output", str(out)]
    result = runner.invoke(app, [*args, "--max-epochs", "4"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary == json.loads((out / "update.json").read_text())
    assert summary["window"] == 2  # the last window: the darkest images
    assert summary["train_size"] + summary["validation_size"] == 16
    assert summary["plan"]["dataset_size"] == summary["train_size"]
    assert summary["metric_after"] > summary["metric_before"]
    workload = load_workload(path)
    weights = np.load(out / "weights.npy")
    assert weights.shape == (workload.parameters,)
    model = workload.model_factory()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    reference = workload.model_factory()
    set_flat_weights(reference, weights)
    assert torch.equal(model.head.weight, reference.head.weight)
