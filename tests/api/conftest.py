"""An in-process API (FastAPI TestClient) over a fresh SQLite store with two tenants."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = ServiceSettings(data_dir=tmp_path, tick_s=0.05, halt_grace_s=1.0)
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("alice", "token-alice", max_active_jobs=2, max_cores=2, max_queued_jobs=5)
    store.create_tenant("bob", "token-bob")
    store.dispose()
    with TestClient(create_app(settings)) as test_client:
        yield test_client
