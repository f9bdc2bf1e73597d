"""``deepedge plan shard``: JSON and table output, bad input is one line and exit 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cluster.json"
runner = CliRunner()


def example() -> dict[str, Any]:
    return json.loads(EXAMPLE.read_text())


def write(tmp_path: Path, doc: Any, name: str = "cluster.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.mark.parametrize("policy", ["deep-edge", "deep-edge-plus", "fair", "oracle"])
def test_example_plan_is_json_whose_shards_sum_to_m(policy: str) -> None:
    result = runner.invoke(app, ["plan", "shard", str(EXAMPLE), "--policy", policy])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["policy"] == policy and plan["feasible"] is True
    assert sum(w["shard"] for w in plan["workers"]) == example()["dataset_size"]
    assert plan["epoch_time_s"] > 0 and plan["total_cost_s"] > plan["epoch_time_s"]


def test_example_excludes_the_overloaded_nano_with_its_app_named() -> None:
    plan = json.loads(runner.invoke(app, ["plan", "shard", str(EXAMPLE)]).stdout)
    nano3 = next(w for w in plan["workers"] if w["id"] == "nano-3")
    assert nano3["selected"] is False and nano3["exclusion"] == "background-app-deadline"
    assert nano3["blocker"]["app"] == "sift-cam-4"


def test_explain_prints_a_table_with_reasons() -> None:
    result = runner.invoke(app, ["plan", "shard", str(EXAMPLE), "--explain"])
    assert result.exit_code == 0, result.output
    assert "excluded (reason)" in result.stdout
    assert "nano-3: background-app-deadline (sift-cam-4 would take" in result.stdout
    assert "predicted epoch time" in result.stdout


def test_noise_changes_the_plan_but_not_the_sum() -> None:
    exact = json.loads(runner.invoke(app, ["plan", "shard", str(EXAMPLE)]).stdout)
    noisy_run = runner.invoke(app, ["plan", "shard", str(EXAMPLE), "--noise", "0.1", "--seed", "3"])
    assert noisy_run.exit_code == 0, noisy_run.output
    noisy = json.loads(noisy_run.stdout)
    assert [w["shard"] for w in noisy["workers"]] != [w["shard"] for w in exact["workers"]]
    assert sum(w["shard"] for w in noisy["workers"]) == exact["dataset_size"]


def _mutate(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(example())
    *parents, last = path.split(".")
    node: Any = doc
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is None and last == "dataset_size":
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (_mutate("dataset_size", None), "dataset_size"),  # missing field
        (_mutate("dataset_size", 0), "dataset_size"),  # |M| = 0
        (_mutate("workers.0.mem_capacity_mb", -1), "mem_capacity_mb"),  # negative size
        (_mutate("workers.0.device", "jetson-xavier"), "device"),  # unknown device type
        (_mutate("workers", []), "workers"),  # empty worker list
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, doc: Any, needle: str) -> None:
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, doc))])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0]
    assert "Traceback" not in result.output


def test_missing_file_is_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "shard", str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_bad_noise_is_exit_2() -> None:
    result = runner.invoke(app, ["plan", "shard", str(EXAMPLE), "--noise", "0.9"])
    assert result.exit_code == 2 and result.stderr.startswith("error:")


def test_oracle_on_a_large_cluster_is_exit_2(tmp_path: Path) -> None:
    doc = example()
    doc["workers"] = [dict(doc["workers"][1], id=f"n{i}") for i in range(9)]
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, doc)), "--policy", "oracle"])
    assert result.exit_code == 2 and "at most 6" in result.stderr


def test_no_feasible_worker_is_a_clear_result_naming_the_blocking_apps(tmp_path: Path) -> None:
    doc = example()
    for w in doc["workers"]:
        w["state"]["cpu_util"] = 0.85
        w["background_apps"][0]["deadline_s"] = 0.1
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, doc))])
    assert result.exit_code == 2
    plan = json.loads(result.stdout)  # the plan itself is still printed
    assert plan["feasible"] is False
    assert all(w["exclusion"] == "background-app-deadline" for w in plan["workers"])
    line = result.stderr.strip()
    assert line.startswith("error: no feasible worker") and "\n" not in line
    assert "tx2-1: sift-cam-1" in line and "nano-3: sift-cam-4" in line


def test_shard_schemas_writes_both_documents(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", "shard-schemas", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("shard-cluster.schema.json", "shard-plan.schema.json"):
        schema = json.loads((tmp_path / name).read_text())
        assert schema["type"] == "object" and schema["properties"]


@pytest.mark.parametrize("policy", ["deep-edge", "deep-edge-plus", "fair", "oracle"])
def test_huge_memory_and_batch_bounds_are_planned_not_crashed(tmp_path: Path, policy: str) -> None:
    """Before: Algorithm 1 raised OverflowError (traceback, exit 1) on b_max = 10^19."""
    doc = example()
    for w in doc["workers"]:
        w["mem_capacity_mb"] = 1e21
        w["max_batch"] = 10**19
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, doc)), "--policy", policy])
    assert result.exit_code in (0, 2), result.output
    plan = json.loads(result.stdout)
    assert sum(w["shard"] for w in plan["workers"]) in (0, doc["dataset_size"])
    if policy != "deep-edge":  # Algorithm 1 checks deadlines at GetMaxBatchSize only
        assert result.exit_code == 0 and plan["feasible"] is True


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param("workers.0.transfer_s_per_sample", 1e308, "transfer_s_per_sample", id="tr"),
        pytest.param("workers.1.init_s", 1e308, "init_s", id="init"),
        pytest.param("num_epochs", 10**400, "num_epochs", id="epochs"),
    ],
)
def test_costs_that_would_overflow_are_refused(
    tmp_path: Path, path: str, value: Any, field: str
) -> None:
    """Before: a 1e308 transfer cost gave ``feasible: true`` with ``total_cost_s: null``
    and kept the worker; a numEpoch of 10^400 raised OverflowError."""
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, _mutate(path, value)))])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0]


def test_a_minimum_batch_beyond_any_data_set_is_refused(tmp_path: Path) -> None:
    """Before: b_min = b_max = 10^19 on a huge-memory worker overflowed int64 in Alg. 1."""
    doc = example()
    doc["workers"][2].update(mem_capacity_mb=1e21, min_batch=10**19, max_batch=10**19)
    result = runner.invoke(app, ["plan", "shard", str(write(tmp_path, doc))])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: workers.2.min_batch")
