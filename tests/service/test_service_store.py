"""The durable store on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _service_helpers import demo_manifest

from deepedge.core.errors import ConflictError, NotFoundError, QuotaExceededError
from deepedge.service.status import JobStatus
from deepedge.service.store import HEAD_REVISION, MIGRATIONS_DIR, JobStore
from deepedge.service.tenants import TENANT_UID_BASE, TokenRole, hash_token

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_submit_is_scoped_to_its_tenant(store: JobStore) -> None:
    alice = store.create_tenant("alice", "tok-a")
    bob = store.create_tenant("bob", "tok-b")
    job, created = store.submit(alice, demo_manifest())
    assert created and job.status is JobStatus.QUEUED
    assert store.get(job.id, tenant_id=alice.id).id == job.id
    with pytest.raises(NotFoundError):
        store.get(job.id, tenant_id=bob.id)
    assert [j.id for j in store.list_jobs(alice.id)] == [job.id]
    assert store.list_jobs(bob.id) == []


def test_tokens_are_stored_hashed_and_resolve(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "secret-token")
    assert store.tenant_by_token("secret-token") == tenant
    assert store.tenant_by_token("wrong") is None
    if store.is_sqlite:
        path = store.url.removeprefix("sqlite:///")
        rows = sqlite3.connect(path).execute("SELECT sha256 FROM tokens").fetchall()
        assert rows and all("secret-token" not in r[0] and len(r[0]) == 64 for r in rows)


def test_tenants_get_sandbox_users_of_their_own_in_creation_order(store: JobStore) -> None:
    alice, bob = store.create_tenant("alice", "a"), store.create_tenant("bob", "b")
    assert (alice.uid, bob.uid) == (TENANT_UID_BASE, TENANT_UID_BASE + 1)
    with pytest.raises(ConflictError):
        store.create_tenant("alice", "c")
    assert store.tenant_named("bob") == bob


@pytest.mark.parametrize("role", [TokenRole.TENANT, TokenRole.JOB])
def test_a_revoked_token_is_refused_at_once_and_others_stay(
    store: JobStore, role: TokenRole
) -> None:
    alice, bob = store.create_tenant("alice", "a"), store.create_tenant("bob", "b")
    record, secret = store.create_token(role, tenant_id=alice.id, label="ci", job_id=None)
    assert store.tenant_by_token(secret) == alice
    with pytest.raises(NotFoundError):  # another tenant cannot revoke it
        store.revoke_token(record.id, bob.id)
    assert store.revoke_token(record.id, alice.id).revoked_at is not None
    assert store.tenant_by_token(secret) is None
    assert store.tenant_by_token("a") == alice and store.tenant_by_token("b") == bob


def test_a_jobs_tokens_end_with_the_job(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "a")
    job, _ = store.submit(tenant, demo_manifest())
    _, secret = store.create_token(TokenRole.JOB, tenant_id=tenant.id, label="j", job_id=job.id)
    for status in (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING):
        store.transition(job.id, status, "test")
        assert store.tenant_by_token(secret) == tenant
    store.transition(job.id, JobStatus.FAILED, "test")
    assert store.tenant_by_token(secret) is None


def test_idempotency_key_returns_the_first_job(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok")
    first, created = store.submit(tenant, demo_manifest(), idempotency_key="abc")
    again, created_again = store.submit(tenant, demo_manifest(), idempotency_key="abc")
    assert created and not created_again and again.id == first.id
    assert len(store.list_jobs(tenant.id)) == 1


@pytest.mark.parametrize(
    ("quota", "manifest_fields"),
    [
        ({"max_cores": 1.0}, {"learners": 3}),
        ({"max_gpus": 0}, {"resources": {"gpus": 1}}),
    ],
)
def test_a_job_larger_than_the_quota_is_refused(
    store: JobStore, quota: dict[str, float], manifest_fields: dict[str, object]
) -> None:
    tenant = store.create_tenant("alice", "tok", **quota)  # type: ignore[arg-type]
    with pytest.raises(QuotaExceededError):
        store.submit(tenant, demo_manifest(**manifest_fields))
    assert store.list_jobs(tenant.id) == []


def test_unfinished_job_limit(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok", max_queued_jobs=2)
    store.submit(tenant, demo_manifest())
    store.submit(tenant, demo_manifest())
    with pytest.raises(QuotaExceededError, match="unfinished"):
        store.submit(tenant, demo_manifest())


def test_transitions_are_timestamped_history_and_compare_and_set(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest())
    store.transition(job.id, JobStatus.PENDING, "admitted")
    with pytest.raises(ConflictError):
        store.transition(job.id, JobStatus.DEPLOYING, "stale", expected=JobStatus.QUEUED)
    store.transition(job.id, JobStatus.HALTED, "halted")
    history = store.history(job.id)
    assert [h.status for h in history] == [JobStatus.QUEUED, JobStatus.PENDING, JobStatus.HALTED]
    assert [h.seq for h in history] == [0, 1, 2]
    assert all(a.at <= b.at for a, b in itertools.pairwise(history))
    assert store.counts_by_status()[JobStatus.HALTED] == 1


def test_delete_removes_everything_of_the_job(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest())
    store.add_checkpoint(job.id, "ckpt-1.ckpt", 10, 1.0)
    store.delete(job.id)
    with pytest.raises(NotFoundError):
        store.get(job.id)
    assert store.history(job.id) == [] and store.checkpoints(job.id) == []


def test_migration_is_idempotent_and_head_constant_is_current(store: JobStore) -> None:
    store.migrate()
    assert store.schema_revision() == HEAD_REVISION
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


def test_tenants_of_an_older_store_keep_their_tokens_and_get_sandbox_users(
    store: JobStore,
) -> None:
    """Revision 0006 moves each tenant's token digest to ``tokens`` and numbers the
    tenants' sandbox users, with their jobs (foreign keys) intact, on both backends."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    store.dispose()
    with store._write_engine.connect() as conn:  # back to 0005, as an older service left it
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.downgrade(config, "0005")
        conn.commit()
        for number, name in enumerate(["alice", "bob"]):
            conn.execute(text(
                "INSERT INTO tenants (id, name, token_sha256, max_active_jobs, max_queued_jobs,"
                " max_cores, max_gpus, created_at) VALUES (:id, :name, :sha, 4, 10, 4, 0, :at)"
            ), {"id": f"t{number}", "name": name, "sha": hash_token(f"tok-{name}"),
                "at": float(number)})  # fmt: skip
        conn.execute(text(
            "INSERT INTO jobs (id, tenant_id, name, kind, manifest_json, status, version, "
            "created_at, updated_at, restarts, deploy_attempts, next_attempt_at) VALUES "
            "('j1', 't1', 'x', 'command', '{}', 'QUEUED', 0, 1, 1, 0, 0, 0)"
        ))  # fmt: skip
        conn.commit()
    store.migrate()
    assert store.schema_revision() == HEAD_REVISION
    alice, bob = store.tenant_by_token("tok-alice"), store.tenant_by_token("tok-bob")
    assert alice is not None and bob is not None
    assert (alice.uid, bob.uid) == (TENANT_UID_BASE, TENANT_UID_BASE + 1)
    assert [j.id for j in store.list_jobs(bob.id)] == ["j1"]
    assert store.create_tenant("carol", "tok-carol").uid == TENANT_UID_BASE + 2


def test_sqlite_runs_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 's.db'}")
    store.migrate()
    with store._read_engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    store.dispose()


CRASH_BEFORE_COMMIT = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import Engine, event
    from deepedge.service.manifest import parse_manifest
    from deepedge.service.store import JobStore
    store = JobStore(sys.argv[1])
    tenant = store.tenant_by_token("tok")
    # Fires after the inserts were sent, just before the database commits them.
    event.listen(Engine, "commit", lambda conn: os._exit(9))
    store.submit(tenant, parse_manifest(
        {"name": "x", "kind": "command", "spec": {"argv": ["true"]}}))
    print("acknowledged", flush=True)
    """
)

ACK_THEN_DIE = textwrap.dedent(
    """
    import os, sys
    from deepedge.service.manifest import parse_manifest
    from deepedge.service.store import JobStore
    store = JobStore(sys.argv[1])
    job, _ = store.submit(store.tenant_by_token("tok"), parse_manifest(
        {"name": "x", "kind": "command", "spec": {"argv": ["true"]}}))
    print(job.id, flush=True)
    os.kill(os.getpid(), 9)
    """
)


@pytest.mark.parametrize(
    ("script", "survives"), [(CRASH_BEFORE_COMMIT, False), (ACK_THEN_DIE, True)]
)
def test_acknowledge_after_commit_across_a_real_crash(
    store: JobStore, script: str, survives: bool
) -> None:
    """Killed before the commit: nothing at all; killed right after the ack: the job is there."""
    tenant = store.create_tenant("alice", "tok")
    env = {**os.environ, "PYTHONPATH": SRC}
    done = subprocess.run([sys.executable, "-c", script, store.url], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode != 0  # it really died
    jobs = store.list_jobs(tenant.id)
    if survives:
        acked = done.stdout.strip()
        assert [j.id for j in jobs] == [acked]
        assert [h.status for h in store.history(jobs[0].id)] == [JobStatus.QUEUED]
    else:
        assert "acknowledged" not in done.stdout
        assert jobs == []
        assert store.counts_by_status()[JobStatus.QUEUED] == 0
