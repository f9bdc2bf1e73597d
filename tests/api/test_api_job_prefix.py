"""A job is named by any prefix of its id that no other of the tenant's jobs shares: what the
dashboard and the CLI's tables show (8 characters) is accepted back on every job endpoint."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest
from _api_helpers import ALICE, BOB
from fastapi.testclient import TestClient

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

NEVER_RUN = {"name": "queued", "kind": "command", "spec": {"argv": ["true"]}}
JOBS = 17  # 16 hex digits: two of 17 ids share their first character (pigeonhole)


@pytest.fixture
def queued(tmp_path: Path) -> Iterator[tuple[TestClient, list[str]]]:
    """An API without its manager (jobs stay QUEUED) and alice's 17 job ids."""
    settings = ServiceSettings(data_dir=tmp_path)
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("alice", "token-alice")
    store.create_tenant("bob", "token-bob")
    store.dispose()
    with TestClient(create_app(settings, run_manager=False), base_url="http://localhost") as client:
        ids = [client.post("/v1/jobs", json=NEVER_RUN, headers=ALICE).json()["id"] for _ in
               range(JOBS)]  # fmt: skip
        yield client, ids


@pytest.mark.parametrize(
    "path",
    ["/v1/jobs/{ref}", "/v1/jobs/{ref}/metrics", "/v1/jobs/{ref}/logs"],
)
def test_a_short_prefix_names_the_job_on_every_read(
    queued: tuple[TestClient, list[str]], path: str
) -> None:
    client, ids = queued
    for job_id in ids[:3]:
        answer = client.get(path.format(ref=job_id[:8]), headers=ALICE)
        assert answer.status_code == 200, answer.text
        if path.endswith("{ref}"):
            assert answer.json()["id"] == job_id
        if path.endswith("metrics"):
            assert answer.json()["job_id"] == job_id


def test_a_prefix_names_the_job_for_actions_too(queued: tuple[TestClient, list[str]]) -> None:
    client, ids = queued
    answer = client.post(f"/v1/jobs/{ids[0][:6].upper()}/halt", headers=ALICE)
    assert answer.status_code == 202, answer.text
    assert answer.json()["job_id"] == ids[0]
    result = client.get(f"/v1/jobs/{ids[1][:8]}/result", headers=ALICE)
    assert result.status_code == 404 and "has no result" in result.json()["message"]


def test_an_ambiguous_prefix_is_refused_naming_the_candidates(
    queued: tuple[TestClient, list[str]],
) -> None:
    client, ids = queued
    first, _ = collections.Counter(i[0] for i in ids).most_common(1)[0]
    answer = client.get(f"/v1/jobs/{first}", headers=ALICE)
    assert answer.status_code == 422
    body = answer.json()
    assert body["error"] == "invalid_input" and "ambiguous" in body["message"]
    shared = [i for i in ids if i.startswith(first)]
    # Two of the jobs that share it are named (which two: the store's order, not creation's).
    assert sum(i[:5] in body["message"] for i in shared) >= 2


@pytest.mark.parametrize("ref", ["zz", "0123-", "%25", ""])
def test_a_prefix_that_is_not_hex_matches_nothing(
    queued: tuple[TestClient, list[str]], ref: str
) -> None:
    client, _ = queued
    assert client.get(f"/v1/jobs/{ref}/metrics", headers=ALICE).status_code == 404


def test_another_tenants_prefix_is_not_found(queued: tuple[TestClient, list[str]]) -> None:
    client, ids = queued
    assert client.get(f"/v1/jobs/{ids[0][:8]}", headers=BOB).status_code == 404
    assert client.get(f"/v1/jobs/{ids[0][:1]}", headers=BOB).status_code == 404
