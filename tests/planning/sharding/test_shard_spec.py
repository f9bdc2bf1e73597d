"""The cluster document rejects malformed input with the offending field named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from _shard_cases import cluster_doc, sift, worker
from pydantic import ValidationError

from deepedge.planning.sharding.plan import plan_schema
from deepedge.planning.sharding.spec import ClusterSpec, cluster_schema

SCHEMAS = Path(__file__).resolve().parents[3] / "docs" / "schemas"


def good() -> dict[str, Any]:
    return cluster_doc([worker("a", apps=[sift()]), worker("b", "jetson-nano")], 100)


def test_good_document_validates_and_converts_states() -> None:
    spec = ClusterSpec.model_validate(good())
    assert spec.workers[0].state.to_node_state().gpu_util == 0.1
    assert spec.epsilon > 0 and spec.max_iterations >= 1 and spec.deadline_margin == 0.0


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node: Any = doc
    for p in parents:
        node = node[int(p)] if p.isdigit() else node[p]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("dataset_size", 0, "dataset_size"),
        ("dataset_size", _DELETE, "dataset_size"),
        ("workers", [], "workers"),
        ("workers.0.device", "jetson-xavier", "workers.0.device"),
        ("workers.0.mem_capacity_mb", -5, "workers.0.mem_capacity_mb"),
        ("workers.0.transfer_s_per_sample", -0.1, "workers.0.transfer_s_per_sample"),
        ("workers.0.state.cpu_util", 1.5, "workers.0.state.cpu_util"),
        ("workers.0.state.gpu_util", None, "workers.0"),  # a TX2 has a GPU
        ("workers.1.min_batch", 0, "workers.1.min_batch"),
        ("workers.1.max_batch", 2, "workers.1"),  # below min_batch
        ("workers.0.background_apps.0.deadline_s", 0, "workers.0.background_apps.0.deadline_s"),
        ("workers.0.background_apps.0.kind", "ffmpeg", "workers.0.background_apps.0.kind"),
        ("workers.1.id", "a", "<document>"),  # duplicate id
        ("epsilon", 0, "epsilon"),
        ("max_iterations", 0, "max_iterations"),
        ("deadline_margin", -0.1, "deadline_margin"),
        ("surprise", 1, "surprise"),
    ],
)
def test_bad_documents_name_the_field(path: str, value: Any, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ClusterSpec.model_validate(_set(good(), path, value))
    locs = [".".join(str(p) for p in e["loc"]) or "<document>" for e in exc.value.errors()]
    assert any(loc.startswith(field) for loc in locs), locs


def test_pi4_state_must_not_carry_a_gpu() -> None:
    doc = good()
    doc["workers"][1]["device"] = "raspberry-pi-4"
    with pytest.raises(ValidationError, match="no GPU"):
        ClusterSpec.model_validate(doc)


@pytest.mark.parametrize(
    ("name", "schema"),
    [("shard-cluster.schema.json", cluster_schema), ("shard-plan.schema.json", plan_schema)],
)
def test_committed_schemas_are_current(name: str, schema) -> None:
    committed = json.loads((SCHEMAS / name).read_text())
    assert committed == schema(), "regenerate: deepedge plan shard-schemas docs/schemas"


def test_example_cluster_validates() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "cluster.json"
    spec = ClusterSpec.model_validate_json(example.read_text())
    assert [w.device.value for w in spec.workers].count("jetson-nano") == 3
    assert spec.dataset_size == 3855
