"""Store fixtures for the job-service and control-plane tests: SQLite and a real PostgreSQL server
(a pytest plugin loaded by tests/conftest.py).

The PostgreSQL server is started by the suite itself (initdb + pg_ctl, loopback only, a free
port, a data folder under /tmp) and stopped at the end; the tests that need it are skipped,
with the reason, only where the binaries are missing or the server cannot start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepedge.api.local_server import free_port
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

PG_BIN = Path(os.environ.get("DEEPEDGE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_pg_user(command: list[str]) -> list[str]:
    """initdb refuses root: run the server as the ``postgres`` system user then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL binaries not found in {PG_BIN} (set DEEPEDGE_PG_BIN)")
    root = Path(tempfile.mkdtemp(prefix="deepedge-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    root.chmod(0o755)
    port = free_port()
    init = subprocess.run(
        _as_pg_user([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "deepedge",
                     "--no-sync"]),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"initdb failed: {init.stderr.strip()[-300:]}")
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off"
    start = subprocess.run(
        _as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-t", "60",
                     "-l", str(root / "pg.log"), "start"]),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if start.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"PostgreSQL did not start: {start.stderr.strip()[-300:]}")
    try:
        yield f"postgresql+psycopg://deepedge@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


def _reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    """A migrated, empty store on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        _reset_postgres(url)
    job_store = JobStore(url)
    job_store.migrate()
    yield job_store
    job_store.dispose()


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    return ServiceSettings(data_dir=tmp_path / "data", tick_s=0.05, backoff_base_s=0.05,
                           halt_grace_s=1.0, checkpoint_sync_s=0.1)  # fmt: skip


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[JobStore]:
    """SQLite only: for the slower lifecycle tests whose store behaviour is covered above."""
    job_store = JobStore(f"sqlite:///{tmp_path / 'service.db'}")
    job_store.migrate()
    yield job_store
    job_store.dispose()
