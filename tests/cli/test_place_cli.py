"""``deepedge plan place``: JSON out, readable tables, exit 3 on infeasible, 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.planning.placement.check import check_solution
from deepedge.planning.placement.model import PlacementProblem, PlacementSolution, placement_schemas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
runner = CliRunner()


@pytest.mark.parametrize("method", ["milp", "heuristic", "auto"])
def test_place_prints_a_checked_solution(method: str) -> None:
    path = EXAMPLES / "placement-tiny.json"
    res = runner.invoke(app, ["plan", "place", str(path), "--method", method, "--time-limit", "20"])
    assert res.exit_code == 0, res.output
    sol = PlacementSolution.model_validate(json.loads(res.stdout))
    problem = PlacementProblem.model_validate_json(path.read_text())
    assert len(sol.routes) == 3
    assert check_solution(problem, sol).ok
    assert all(r.latency_ms <= r.max_latency_ms + 1e-9 for r in sol.routes)


def test_place_explain_renders_tables() -> None:
    res = runner.invoke(app, ["plan", "place", str(EXAMPLES / "placement-tiny.json"), "--explain"])
    assert res.exit_code == 0, res.output
    for word in ("placement", "routes", "utilisation", "latency ms", "cam1"):
        assert word in res.stdout


def test_infeasible_exits_3_and_names_the_source() -> None:
    res = runner.invoke(app, ["plan", "place", str(EXAMPLES / "placement-infeasible.json")])
    assert res.exit_code == 3
    assert "source cam1 model detector" in res.stderr
    assert "latency limit 15.0 ms" in res.stderr


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("{not json", "not valid JSON"),
        ('{"sources": 3}', "sources"),
        ('{"sources": [], "edge_nodes": [], "models": []}', "sources"),
    ],
)
def test_malformed_exits_2_with_one_line(tmp_path: Path, content: str, field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    res = runner.invoke(app, ["plan", "place", str(path)])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0]


def test_unknown_model_reference_is_bad_input(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "placement-tiny.json").read_text())
    doc["sources"][0]["demands"][0]["model"] = "nope"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["plan", "place", str(path)])
    assert res.exit_code == 2
    assert "unknown model 'nope'" in res.stderr


@pytest.mark.parametrize("name", sorted(placement_schemas()))
def test_committed_schema_is_current(name: str) -> None:
    committed = json.loads((SCHEMAS / name).read_text())
    assert committed == placement_schemas()[name], "run: deepedge plan place-schemas docs/schemas"


def test_examples_validate() -> None:
    paths = sorted(EXAMPLES.glob("placement-*.json"))
    assert EXAMPLES / "placement-infeasible.json" in paths and len(paths) >= 2
    for path in paths:
        PlacementProblem.model_validate_json(path.read_text())


def test_many_blocked_demands_are_summarised_not_listed(tmp_path: Path) -> None:
    """Before: one stderr line per blocked demand (about 500,000 for a 50 MB document)."""
    doc = json.loads((EXAMPLES / "placement-infeasible.json").read_text())
    blocked, *served = doc["sources"]
    doc["sources"] = served + [dict(blocked, id=f"cam-{k}") for k in range(3000)]
    link = next(ln for ln in doc["links"] if ln["a"] == blocked["id"])
    others = [ln for ln in doc["links"] if blocked["id"] not in (ln["a"], ln["b"])]
    doc["links"] = others + [dict(link, a=f"cam-{k}") for k in range(3000)]
    path = tmp_path / "many.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["plan", "place", str(path)])
    assert res.exit_code == 3
    progress, lines = [], []
    for line in res.stderr.strip().splitlines():
        (progress if line.startswith("place: ") else lines).append(line)
    assert len(progress) == 1 and len(lines) <= 12, (progress, len(lines))
    assert "source cam-0 model detector" in res.stderr
    assert "and 2990 more (of 3000" in res.stderr
    assert lines[-1].startswith("error: 3000 demand(s) cannot be served")
