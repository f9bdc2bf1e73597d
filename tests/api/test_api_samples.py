"""``/v1/deployments/{name}/samples``: export and delete a deployment's samples through the
API; each tenant reaches only its own deployments' samples, and bad input is a 422 naming
its field. (The deployments are stopped before the app starts: the control loop leaves
them alone, and the samples are written straight into the site's store.)"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _api_helpers import ALICE, BOB
from fastapi.testclient import TestClient

from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import (
    FEEDBACK,
    Retention,
    Sample,
    SampleStore,
    sample_store_path,
)

# (tenant, deployment) -> the value every input of its samples holds
DEPLOYMENTS = {("alice", "cam"): 1.0, ("alice", "door"): 2.0, ("bob", "cam"): 3.0}
N = 5  # samples per deployment, served at t = 100, 101, ...


def _samples(value: float) -> list[Sample]:
    return [Sample(f"r{i}", 100.0 + i, 1, RouteKind.SERVING, i % 3,
                   np.full((1, 4, 4), value + i / 10, dtype=np.float32))
            for i in range(N)]  # fmt: skip


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[TestClient, SampleStore]]:
    from deepedge.api.app import create_app
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.rollout_status import DeploymentStatus
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore

    settings = ServiceSettings(data_dir=tmp_path)
    store = JobStore(settings.url)
    store.migrate()
    tenants = {name: store.create_tenant(name, f"token-{name}") for name in ("alice", "bob")}
    registry = DeploymentStore(store)
    samples = SampleStore(sample_store_path(settings.data_dir))
    for (tenant, name), value in DEPLOYMENTS.items():
        record, _ = registry.create(tenants[tenant].id, DeploymentSpec(name=name))
        registry.commit(record, Step(deployment={"status": DeploymentStatus.STOPPED}))
        samples.append(record.id, _samples(value), Retention(), now=100.0 + N)
        samples.label(record.id, "r1", 2, FEEDBACK, now=200.0)
    store.dispose()
    with TestClient(create_app(settings, run_manager=False), base_url="http://localhost") as c:
        yield c, samples


def _export(client: TestClient, who: dict[str, str], name: str, **params: Any) -> Any:
    return client.get(f"/v1/deployments/{name}/samples/export", params=params, headers=who)


def _load(body: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(body), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _delete(client: TestClient, who: dict[str, str], name: str, body: Any) -> Any:
    return client.request("DELETE", f"/v1/deployments/{name}/samples", json=body, headers=who)


@pytest.mark.parametrize(
    ("who", "name", "value"), [(ALICE, "cam", 1.0), (ALICE, "door", 2.0), (BOB, "cam", 3.0)]
)
def test_an_export_holds_the_callers_deployments_samples_only(
    site: tuple[TestClient, SampleStore], who: dict[str, str], name: str, value: float
) -> None:
    client, _ = site
    answer = _export(client, who, name)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-sample-count"] == str(N)
    assert f'filename="{name}-samples.npz"' in answer.headers["content-disposition"]
    got = _load(answer.content)
    expected = np.stack([s.input for s in _samples(value)])
    np.testing.assert_array_equal(got["inputs"], expected)  # alice's cam never bob's cam
    assert list(got["request_id"]) == [f"r{i}" for i in range(N)]
    assert list(got["label"]) == [-1, 2, -1, -1, -1]
    assert list(got["label_source"]) == ["", FEEDBACK, "", "", ""]
    assert list(got["prediction"]) == [i % 3 for i in range(N)]


def test_an_export_takes_a_time_range(site: tuple[TestClient, SampleStore]) -> None:
    client, _ = site
    answer = _export(client, ALICE, "cam", since=101, until=103.5)
    assert answer.headers["x-sample-count"] == "3"
    assert list(_load(answer.content)["request_id"]) == ["r1", "r2", "r3"]


@pytest.mark.parametrize(
    ("who", "name"), [(ALICE, "nope"), (BOB, "door"), ({"Authorization": "Bearer x"}, "cam")]
)
def test_another_tenants_or_an_unknown_deployment_is_not_found(
    site: tuple[TestClient, SampleStore], who: dict[str, str], name: str
) -> None:
    client, samples = site
    status = 401 if who["Authorization"] == "Bearer x" else 404
    assert _export(client, who, name).status_code == status
    assert _delete(client, who, name, {"all": True}).status_code == status
    answer = _delete(client, who, name, {"request_ids": ["r1"]})
    assert answer.status_code == status
    if status == 404:  # the same answer whether it is another tenant's or nobody's
        assert answer.json() == {"error": "not_found", "message": f"deployment {name} not found"}
    assert sum(u.samples for u in samples.all_usage().values()) == N * len(DEPLOYMENTS)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"since": 5, "until": 1}, "until"), ({"since": "nan"}, "since"),
     ({"until": "inf"}, "until"), ({"since": "yesterday"}, "since")],
)  # fmt: skip
def test_a_malformed_export_range_is_422_naming_the_field(
    site: tuple[TestClient, SampleStore], params: dict[str, Any], field: str
) -> None:
    client, _ = site
    answer = _export(client, ALICE, "cam", **params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"request_ids": []}, "request_ids"),
        ({"request_ids": [""]}, "request_ids.0"),
        ({}, "all"),  # names nothing: never taken as everything
        ({"since": 104, "until": 101}, "until"),
        ({"all": True, "since": 101}, "<body>"),
        ({"request_ids": ["r1"], "until": 103}, "<body>"),
        ({"everything": True}, "everything"),
        (None, "<body>"),  # no body at all
    ],
)
def test_a_malformed_deletion_is_422_naming_the_field_and_deletes_nothing(
    site: tuple[TestClient, SampleStore], body: dict[str, Any], field: str
) -> None:
    client, samples = site
    answer = _delete(client, ALICE, "cam", body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field
    assert sum(u.samples for u in samples.all_usage().values()) == N * len(DEPLOYMENTS)


def test_a_non_finite_time_in_the_body_is_422(site: tuple[TestClient, SampleStore]) -> None:
    client, _ = site
    answer = client.request("DELETE", "/v1/deployments/cam/samples", content=b'{"since": NaN}',
                            headers={**ALICE, "Content-Type": "application/json"})  # fmt: skip
    assert answer.status_code == 422 and answer.json()["field"] == "since"


def test_deletions_are_counted_and_reach_the_callers_deployment_only(
    site: tuple[TestClient, SampleStore],
) -> None:
    client, samples = site
    by_id = _delete(client, ALICE, "cam", {"request_ids": ["r0", "r3", "r9"]})
    assert by_id.status_code == 200, by_id.text
    assert by_id.json() == {"deployment": "cam", "deleted": 2, "bytes": 2 * 64,
                            "not_found": ["r9"]}  # fmt: skip
    ranged = _delete(client, ALICE, "cam", {"since": 101, "until": 103})
    assert ranged.json()["deleted"] == 2  # r1, r2
    assert list(_load(_export(client, ALICE, "cam").content)["request_id"]) == ["r4"]
    traffic = client.get("/v1/deployments/cam/traffic", headers=ALICE).json()
    assert traffic["samples"]["stored"] == 1
    # bob's cam (the same name, the same request ids) and alice's door are untouched
    for who, name in ((BOB, "cam"), (ALICE, "door")):
        assert _export(client, who, name).headers["x-sample-count"] == str(N)
    everything = _delete(client, ALICE, "door", {"all": True})
    assert everything.json()["deleted"] == N
    assert _export(client, ALICE, "door").headers["x-sample-count"] == "0"
    assert _export(client, BOB, "cam").headers["x-sample-count"] == str(N)
    counts = {k: u.samples for k, u in SampleStore(samples.path).all_usage().items()}
    assert sorted(counts.values()) == [0, 1, N]  # (reopened: the deletions were committed)
