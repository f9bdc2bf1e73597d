"""A ``model-update`` submission with a bad workload is a 422 naming the workload's field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _api_helpers import ALICE
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("override", "field"),
    [
        (
            {"model": {"entry_point": "mysite.models:make", "kwargs": {"fail": True}}},
            "model.entry_point",
        ),
        ({"input": {"size": [12, 12], "channels": 1}}, "input"),
    ],
)
def test_a_bad_workload_is_422_naming_its_field(
    client: TestClient, user_workload: Callable[..., Path], override: dict, field: str
) -> None:
    document = {"workload": str(user_workload(**override)), "epochs": 2}
    manifest = {"name": "m", "kind": "model-update", "spec": {"document": document}}
    response = client.post("/v1/jobs", json=manifest, headers=ALICE)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == f"spec.document.workload.{field}"
    assert body["message"].startswith("spec.document.workload: " + field.split(".")[0])
    assert client.get("/v1/jobs", headers=ALICE).json()["jobs"] == []


def test_an_inline_workload_with_a_bad_field_is_422_naming_it(client: TestClient) -> None:
    document = {"workload": {"model": {"entry_point": "not an entry point"}}}
    manifest = {"name": "m", "kind": "model-update", "spec": {"document": document}}
    response = client.post("/v1/jobs", json=manifest, headers=ALICE)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "spec.document.workload"
    assert "model.entry_point: String should match pattern" in body["message"]
