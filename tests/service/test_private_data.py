"""The data folder's tenant data is the service's user's only: the folders that hold it
0700 (made so, or narrowed), the job store's SQLite files 0600; files written there
atomically can be given their mode from the first byte."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from deepedge.controlplane.artifacts import deployment_dir
from deepedge.core.durable import private_folder, write_atomically
from deepedge.service.private_data import DEPLOYMENTS, FOLDERS, protect, sqlite_path
from deepedge.service.store import JobStore, sqlite_url


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_tenant_data_folders_and_the_store_are_narrowed(tmp_path: Path) -> None:
    store = JobStore(sqlite_url(tmp_path / "service.db"))
    store.migrate()
    store.create_tenant("a", "tok-a")
    (tmp_path / "deployments" / "t1" / "d1").mkdir(parents=True, mode=0o755)
    (tmp_path / "deployments").chmod(0o755)
    (tmp_path / "jobs").mkdir(mode=0o755)  # the jobs' folders are their tenants' too
    made = protect(tmp_path, store.url)
    assert {_mode(tmp_path / folder) for folder in FOLDERS} == {0o700}
    assert _mode(tmp_path / "service.db") == 0o600 and tmp_path / "service.db" in made
    assert {_mode(p) for p in tmp_path.glob("service.db*")} == {0o600}
    assert _mode(tmp_path / "jobs") == 0o755
    store.dispose()


def test_every_deployments_folder_lies_under_the_private_one(tmp_path: Path) -> None:
    from types import SimpleNamespace

    record: Any = SimpleNamespace(tenant_id="t1", id="d1")
    assert deployment_dir(tmp_path, record).is_relative_to(tmp_path / DEPLOYMENTS)


@pytest.mark.parametrize(("url", "path"), [
    ("sqlite:////srv/data/service.db", Path("/srv/data/service.db")),
    ("sqlite:///:memory:", None),
    ("postgresql://db/deepedge", None),
])  # fmt: skip
def test_only_a_sqlite_files_store_has_files_to_narrow(url: str, path: Path | None) -> None:
    assert sqlite_path(url) == path


def test_private_folders_and_files_with_their_mode_from_the_start(tmp_path: Path) -> None:
    folder = private_folder(tmp_path / "a" / "b")
    assert _mode(folder) == 0o700 and _mode(tmp_path / "a") != 0o700  # (as mkdir -p)
    write_atomically(folder / "x.bin", b"secret", mode=0o600)
    write_atomically(folder / "y.bin", b"plain")
    assert (folder / "x.bin").read_bytes() == b"secret" and _mode(folder / "x.bin") == 0o600
    umask = os.umask(0)
    os.umask(umask)
    assert _mode(folder / "y.bin") == 0o666 & ~umask  # (the umask's default, as before)
