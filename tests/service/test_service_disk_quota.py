"""Disk accounting of tenants: what is counted (blocks, each inode once, no link followed),
the budget a collector enforces, the tenant record's quota and its migration."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from deepedge.service.disk_quota import (
    DEFAULT_MAX_DISK_MB,
    DiskBudget,
    tenant_folders,
    tenants_over_quota,
    usage_bytes,
)
from deepedge.service.records import Tenant, TenantId
from deepedge.service.store import MIGRATIONS_DIR, JobStore

MB = 1 << 20


def _write(path: Path, mb: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * int(mb * MB))


def _mb(folders: list[Path]) -> float:
    return usage_bytes(folders) / MB


def _nested(root: Path) -> None:
    _write(root / "a", 3)
    _write(root / "d" / "e" / "b", 2)


def _hard_link(root: Path) -> None:  # the same blocks: once
    _write(root / "a", 4)
    os.link(root / "a", root / "b")


def _link_outside(root: Path) -> None:  # never followed
    _write(root.parent / "outside", 8)
    os.symlink(root.parent / "outside", root / "l")


def _sparse(root: Path) -> None:  # 1 GiB long, (almost) nothing on disk
    (root / "sparse").touch()
    os.truncate(root / "sparse", 1 << 30)


def _missing(root: Path) -> None:
    os.rmdir(root)


@pytest.mark.parametrize(
    ("build", "low_mb", "high_mb"),
    [(_nested, 5.0, 5.1), (_hard_link, 4.0, 4.1), (_link_outside, 0.0, 0.1),
     (_sparse, 0.0, 0.1), (_missing, 0.0, 0.0)],
)  # fmt: skip
def test_usage_counts_blocks_once_and_follows_no_link(
    tmp_path: Path, build: Callable[[Path], None], low_mb: float, high_mb: float
) -> None:
    root = tmp_path / "tenant"
    root.mkdir()
    build(root)
    assert low_mb <= _mb([root]) <= high_mb


def test_the_tenant_folders_are_its_jobs_runs_and_deployments(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for tree, mb in (("jobs", 3), ("runs", 2), ("deployments", 1)):
        _write(data / tree / "t1" / "x" / "f", mb)
        _write(data / tree / "t2" / "f", 10)  # another tenant's
    assert 6.0 <= _mb(tenant_folders(data, "t1")) < 6.1
    tenants = [Tenant(TenantId(t), t, 1, 1, 1.0, 0, max_disk_mb=q) for t, q in
               (("t1", 8), ("t2", 8))]  # fmt: skip
    over = tenants_over_quota(data, tenants)
    assert list(over) == ["t2"]
    assert over["t2"].startswith("disk quota of tenant t2 reached (30 MB of 8 MB)")


@pytest.mark.parametrize(
    ("elsewhere_mb", "job_mb", "quota_mb", "reached"),
    [(0, 5, 8, False), (4, 5, 8, True), (0, 9, 8, True), (7.5, 0.2, 8, False)],
)
def test_a_job_may_grow_by_what_its_tenant_has_left(
    tmp_path: Path, elsewhere_mb: float, job_mb: float, quota_mb: int, reached: bool
) -> None:
    data = tmp_path / "data"
    job = data / "jobs" / "t1" / "j1"
    _write(data / "runs" / "t1" / "r" / "f", elsewhere_mb)
    job.mkdir(parents=True)
    budget = DiskBudget.measure("alice", "t1", data, job, quota_mb)
    assert elsewhere_mb <= budget.elsewhere_mb < elsewhere_mb + 0.1
    _write(job / "work" / "out", job_mb)
    reason = budget.reached()
    assert (reason is not None) is reached
    if reason is not None:
        assert reason.startswith("disk quota of tenant alice reached (") and (
            reason.endswith(f" MB of {quota_mb} MB)")
        )


def test_a_budget_travels_to_the_collector_on_its_command_line(tmp_path: Path) -> None:
    import argparse

    from deepedge.service import disk_quota

    budget = DiskBudget("bob", tmp_path, 64, 12.5)
    parser = argparse.ArgumentParser()
    disk_quota.add_budget_options(parser)
    assert disk_quota.from_options(parser.parse_args(budget.argv())) == budget
    assert disk_quota.from_options(parser.parse_args([])) is None


def test_a_tenants_disk_quota_is_kept_and_changed(sqlite_store: JobStore) -> None:
    store = sqlite_store
    plain = store.create_tenant("plain", "tok-plain")
    small = store.create_tenant("small", "tok-small", max_disk_mb=64)
    assert (plain.max_disk_mb, small.max_disk_mb) == (DEFAULT_MAX_DISK_MB, 64)
    assert store.tenancy.set_max_disk_mb(small.id, 128).max_disk_mb == 128
    assert store.tenant(small.id).max_disk_mb == 128
    assert store.tenant_by_token("tok-plain").max_disk_mb == DEFAULT_MAX_DISK_MB  # type: ignore[union-attr]


def test_tenants_of_an_older_store_get_the_default_disk_quota(sqlite_store: JobStore) -> None:
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    store = sqlite_store
    store.dispose()
    with store._write_engine.connect() as conn:  # back to 0006, as an older service left it
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.downgrade(config, "0006")
        conn.commit()
        conn.execute(text(
            "INSERT INTO tenants (id, name, max_active_jobs, max_queued_jobs, max_cores, "
            "max_gpus, created_at, uid, grants_json) VALUES ('t0', 'old', 4, 10, 4, 0, 0, "
            "200000, '[]')"
        ))  # fmt: skip
        conn.commit()
    store.migrate()
    assert store.tenancy.named("old").max_disk_mb == DEFAULT_MAX_DISK_MB
    assert store.create_tenant("new", "tok-new", max_disk_mb=5).max_disk_mb == 5
