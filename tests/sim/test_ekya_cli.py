"""``deepedge plan window`` and ``deepedge simulate ekya``: outputs and bad input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _window() -> dict[str, Any]:
    return json.loads((ROOT / "examples" / "ekya-window.json").read_text())


def test_plan_window_outputs_plan_with_packing() -> None:
    result = runner.invoke(app, ["plan", "window", str(ROOT / "examples" / "ekya-window.json")])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["scheduler"] == "thief"
    assert plan["allocated_gpus"] <= 3.0 + 1e-9
    assert {s["stream_id"] for s in plan["streams"]} == {"A", "B"}
    assert max(plan["packing"]["gpu_load"]) <= 1.0 + 1e-9


@pytest.mark.parametrize("scheduler", ["thief", "uniform", "oracle"])
def test_simulate_ekya(scheduler: str) -> None:
    path = ROOT / "examples" / "ekya-illustrative-trace.json"
    result = runner.invoke(app, ["simulate", "ekya", str(path), "--scheduler", scheduler])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["scheduler"] == scheduler
    assert len(out["windows"]) == 2
    assert 0.0 < out["mean_accuracy"] <= 1.0


@pytest.mark.parametrize(("gap", "code"), [("0.05", 0), ("-1", 2)])
def test_simulate_ekya_with_pruning(gap: str, code: int) -> None:
    path = ROOT / "examples" / "ekya-illustrative-trace.json"
    result = runner.invoke(app, ["simulate", "ekya", str(path), "--prune-max-gap", gap])
    assert result.exit_code == code, result.output
    if code == 0:
        assert len(json.loads(result.stdout)["windows"]) == 2
    else:
        assert "prune-max-gap" in result.output


def _mutate(doc: dict[str, Any], case: str) -> dict[str, Any]:
    if case == "no streams":
        doc["streams"] = []
    elif case == "a_min above every config":
        doc["a_min"] = 0.99
    elif case == "negative gpu seconds":
        doc["streams"][0]["retraining_configs"][0]["gpu_seconds"] = -5
    elif case == "zero gpus":
        doc["gpus"] = 0
    elif case == "infinite gpu demand":
        doc["streams"][0]["inference_configs"][0]["gpu_demand"] = float("inf")
    elif case == "NaN data scale":
        doc["streams"][1]["data_scale"] = float("nan")
    elif case == "too many quanta":
        doc["delta_gpus"] = 1e-6
    return doc


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("no streams", "streams"),
        ("a_min above every config", "a_min"),
        ("negative gpu seconds", "gpu_seconds"),
        ("zero gpus", "gpus"),
        ("infinite gpu demand", "gpu_demand"),
        ("NaN data scale", "data_scale"),
        ("too many quanta", "quanta"),
    ],
)
def test_bad_window_input_exits_2(tmp_path: Path, case: str, needle: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_mutate(_window(), case)))
    result = runner.invoke(app, ["plan", "window", str(path)])
    assert result.exit_code == 2
    err = result.stderr.strip()
    assert err.startswith("error:") and needle in err
    assert len(err.splitlines()) == 1
    assert "Traceback" not in result.output


def test_bad_trace_and_gpus_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{not json")
    assert runner.invoke(app, ["simulate", "ekya", str(path)]).exit_code == 2
    good = str(ROOT / "examples" / "ekya-illustrative-trace.json")
    result = runner.invoke(app, ["simulate", "ekya", good, "--gpus", "0"])
    assert result.exit_code == 2
    assert "gpus" in result.stderr


def test_huge_finite_costs_are_planned_not_crashed_on(tmp_path: Path) -> None:
    """A cost whose product overflows a float is a configuration that never finishes."""
    doc = _window()
    stream = doc["streams"][0]
    stream["data_scale"] = 1e308
    for c in stream["retraining_configs"]:
        c["gpu_seconds"] = 1e308
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["plan", "window", str(path)])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    first = next(s for s in plan["streams"] if s["stream_id"] == stream["stream_id"])
    assert first["retraining_config"] is None


def test_oracle_refuses_an_instance_too_large_to_enumerate(tmp_path: Path) -> None:
    doc = _window()
    doc["gpus"], doc["delta_gpus"] = 100.0, 0.1
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["plan", "window", str(path), "--scheduler", "oracle"])
    assert result.exit_code == 2
    assert "oracle is for small instances" in result.stderr
    thief = runner.invoke(app, ["plan", "window", str(path)])
    assert thief.exit_code == 0, thief.output


def test_a_file_that_is_not_utf8_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00{")
    result = runner.invoke(app, ["plan", "window", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path} is not UTF-8 text: invalid start byte"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--horizon-windows", "1"], 0),
        (["--horizon-windows", "2", "--horizon-discount", "0.5", "--scheduler", "oracle"], 0),
        (["--horizon-windows", "-1"], 2),
        (["--horizon-windows", "1", "--horizon-discount", "0"], 2),
        (["--horizon-windows", "1", "--calibration", "stream"], 0),
        (["--calibration", "family", "--calibration-shrinkage", "0"], 0),
        (["--calibration", "stream", "--calibration-shrinkage", "-1"], 2),
        (["--calibration", "bogus"], 2),
        (["--horizon-windows", "1", "--reprofile", "2", "--reprofile-top-k", "1"], 0),
        (["--reprofile", "3"], 0),
        (["--reprofile", "1"], 2),
        (["--reprofile", "2", "--reprofile-top-k", "0"], 2),
    ],
)
def test_simulate_ekya_with_horizon(args: list[str], code: int) -> None:
    path = ROOT / "examples" / "ekya-drifting-trace.json"
    result = runner.invoke(app, ["simulate", "ekya", str(path), *args])
    assert result.exit_code == code, result.output
    if code == 0:
        out = json.loads(result.stdout)
        assert 0.0 < out["mean_accuracy"] <= 1.0 and len(out["windows"]) > 1
