"""Request bodies over the service's limit are refused with 413, declared or chunked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

LIMIT = 4096
HEADERS = {"Authorization": "Bearer token-a", "Content-Type": "application/json"}
MANIFEST = b'{"name": "ok", "kind": "command", "spec": {"argv": ["true"]}}'


@pytest.fixture
def small_client(tmp_path: Path) -> Iterator[TestClient]:
    settings = ServiceSettings(data_dir=tmp_path, max_request_bytes=LIMIT)
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("a", "token-a")
    store.dispose()
    with TestClient(create_app(settings, run_manager=False), base_url="http://localhost") as client:
        yield client


def _assert_refused(response) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error"] == "request_too_large" and str(LIMIT) in body["message"]


def test_a_declared_length_over_the_limit_is_refused_unread(small_client: TestClient) -> None:
    _assert_refused(small_client.post("/v1/jobs", content=b" " * (LIMIT + 1), headers=HEADERS))


def test_a_chunked_body_is_refused_when_it_crosses_the_limit(small_client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 1000

    _assert_refused(small_client.post("/v1/jobs", content=chunks(), headers=HEADERS))
    # The service goes on serving, and nothing of the refused request was stored.
    assert small_client.get("/v1/jobs", headers=HEADERS).json()["jobs"] == []


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_under_the_limit_goes_through(small_client: TestClient, chunked: bool) -> None:
    content: bytes | Iterator[bytes] = iter([MANIFEST]) if chunked else MANIFEST
    response = small_client.post("/v1/jobs", content=content, headers=HEADERS)
    assert response.status_code == 201, response.text
