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
    return doc


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("no streams", "streams"),
        ("a_min above every config", "a_min"),
        ("negative gpu seconds", "gpu_seconds"),
        ("zero gpus", "gpus"),
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
