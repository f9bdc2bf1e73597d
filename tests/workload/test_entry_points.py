"""A user's workload end to end through ``deepedge update`` and ``deepedge ekya``; frozen
layers stay as the factory made them."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from _workload_helpers import write_workload
from deepedge.cli import app
from deepedge.cli.update import render_summary
from deepedge.runtime.training.parameter_server import load_checkpoint
from deepedge.workload.model import import_entry_point
from deepedge.workload.resolve import load_workload

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.json")
runner = CliRunner()


@pytest.mark.slow
@pytest.mark.ray
def test_update_trains_a_user_model_on_its_own_images(tmp_path: Path, ray_cluster: None) -> None:
    path = write_workload(tmp_path)  # the conv layer frozen, the linear head trained
    out = tmp_path / "out"
    args = [
        "update",
        "--workload",
        str(path),
        "--cluster",
        CLUSTER,
        "--out",
        str(out),
        "-o",
        "json",
    ]
    result = runner.invoke(app, [*args, "--max-epochs", "4"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    devices = summary.pop("devices")
    assert devices == "emulated testbed at this host's speed (unpaced)"
    assert summary == json.loads((out / "update.json").read_text())
    # Progress on stderr: Ray starting, then every epoch as it ends.
    epochs = [line for line in result.stderr.splitlines() if "accuracy" in line]
    assert epochs and epochs[0].startswith("update: [1/4 epochs] epoch 1: accuracy")
    assert "File descriptor limit" not in result.output
    table = render_summary({**summary, "devices": devices}, out, wide=False)
    assert table.startswith("workload:   site-cameras, window 2")
    assert f"{summary['metric_before']:.3f} -> {summary['metric_after']:.3f}" in table
    assert summary["window"] == 2  # the last window: the darkest images
    assert summary["train_size"] + summary["validation_size"] == 16
    assert summary["plan"]["dataset_size"] == summary["train_size"]
    # (a handful of held-out images: chance before, and a few epochs of asynchronous
    # training may leave a tie; the update must not make the model worse)
    assert summary["metric_after"] >= summary["metric_before"]
    workload = load_workload(path)
    assert summary["frozen"] == ["features.0.weight", "features.0.bias"]
    assert summary["trainable_parameters"] == 34
    assert summary["model_file"]["format"] == "state-dict" and summary["model_file"]["round_trip"]
    assert not (out / "weights.npy").exists()  # the whole model, in the user's format
    model = workload.model_factory()
    model.load_state_dict(torch.load(out / "model.pt", weights_only=True))
    # the frozen layer is the factory's, unchanged; the head trained
    initial = workload.model_factory()
    assert torch.equal(model.features[0].weight, initial.features[0].weight)
    assert torch.equal(model.features[0].bias, initial.features[0].bias)
    assert not torch.equal(model.head.weight, initial.head.weight)
    # and never pushed: the parameter server held (and checkpointed) the head only
    checkpoint = load_checkpoint(out / "checkpoints")
    assert checkpoint is not None and checkpoint.weights.shape == (34,)


@pytest.mark.slow
@pytest.mark.ray
def test_ekya_retrains_a_user_model_on_its_own_windows(tmp_path: Path, ray_cluster: None) -> None:
    path = write_workload(tmp_path)
    args = ["ekya", "--workload", str(path), "--streams", "1", "--windows", "2"]
    result = runner.invoke(app, [*args, "--samples", "20", "--window-s", "20", "-o", "json"])
    assert result.exit_code == 0, result.output
    windows = json.loads(result.stdout)["windows"]
    # Each window's outcome was told as it ended (stderr), the result alone on stdout.
    assert "ekya: [1/2 windows] window 1:" in result.stderr
    assert "ekya: [2/2 windows] window 2:" in result.stderr
    assert [w["index"] for w in windows] == [1, 2]
    rows = [w["streams"][0] for w in windows]
    assert all(r["configs_profiled"] >= 1 for r in rows)
    retrained = [r for r in rows if r["retrained"] is not None]
    assert retrained, rows  # the dusk windows drift away from window 0's model
    assert rows[-1]["accuracy_after"] >= 0.75  # an untrained model scores about 0.5


def test_ekya_retraining_leaves_frozen_layers_alone(tmp_path: Path) -> None:
    from deepedge.planning.window.documents import RetrainingConfig, RetrainingHyperparameters
    from deepedge.runtime.edge.edge_server import RetrainingJob, state_of

    workload = load_workload(write_workload(tmp_path))
    window = workload.window(2)
    deployed = state_of(workload.model_factory())
    hp = RetrainingHyperparameters(
        epochs=3, batch_size=4, last_layer_neurons=2, frozen_layers=0, data_fraction=1.0
    )
    config = RetrainingConfig(name="all", accuracy_after=0.9, gpu_seconds=1.0, hyperparameters=hp)
    train = (window.images, window.labels)
    outcome = RetrainingJob("cam00", 1.0).run(
        deployed, workload.model_factory, train, train, config
    )
    for name in workload.frozen_names:
        assert np.array_equal(outcome.state[name], deployed[name]), name
    assert not np.array_equal(outcome.state["head.weight"], deployed["head.weight"])


def test_the_micro_profiler_runs_on_a_user_workload(tmp_path: Path) -> None:
    from deepedge.bench.ekya_microprofile import main, run_microprofile

    workload = load_workload(write_workload(tmp_path))
    result = run_microprofile(quick=True, seed=0, workload=workload)
    assert {p.window for p in result.pairs} == {2}  # the last window, deployed from window 1
    assert {p.config for p in result.pairs} == {"e5-f100-z0", "e5-f100-z1", "e10-f100-z0",
                                                "e10-f100-z1"}  # fmt: skip
    assert all(0.0 <= p.predicted <= 1.0 and 0.0 <= p.actual <= 1.0 for p in result.pairs)
    main(["--quick", "--workload", str(write_workload(tmp_path))])


def test_the_profiler_takes_a_workload(tmp_path: Path) -> None:
    from deepedge.profiling.profiler import workload_profile

    task = workload_profile(str(write_workload(tmp_path)), windows=2)
    assert task.images.shape[1:] == (3, 12, 12) and len(task.images) == len(task.labels) == 32
    assert task.name.startswith("site-cameras")
    bad = write_workload(tmp_path, frozen={"count": 9})
    result = runner.invoke(
        app, ["profile", "--quick", "--workload", str(bad), "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 2 and result.output.startswith("error: frozen.count")


def _site(folder: Path, package: str, modules: dict[str, str]) -> Path:
    """``folder/package`` with one module per name, each whose ``make()`` returns its text."""
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text("")
    for name, text in modules.items():
        (folder / package / f"{name}.py").write_text(f"def make():\n    return {text!r}\n")
    return folder


def test_two_workloads_packages_of_one_name_each_import_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that loads several workloads (the control plane's) runs each one's code,
    never the package of the same name an earlier workload's folder gave."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    package = f"site_{uuid.uuid4().hex[:8]}"
    first = _site(tmp_path / "a", package, {"models": "a"})
    second = _site(tmp_path / "b", package, {"models": "b", "streams": "b's streams"})
    try:
        assert import_entry_point(f"{package}.models:make", "model", (first,))() == "a"
        assert import_entry_point(f"{package}.models:make", "model", (second,))() == "b"
        assert import_entry_point(f"{package}.streams:make", "data", (second,))() == "b's streams"
        assert import_entry_point(f"{package}.models:make", "model", (first,))() == "a"
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == package]:
            del sys.modules[name]


def test_a_workload_folder_never_replaces_a_module_the_process_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = _site(tmp_path, "json", {"decoder": "not the standard library's"})
    assert import_entry_point("json:dumps", "model", (folder,)) is json.dumps
    assert sys.modules["json"] is json
