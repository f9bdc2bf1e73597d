"""Group commit of submissions, keyset paging over shared timestamps, wake-ups, requests."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from _service_helpers import demo_manifest

from deepedge.core.errors import QuotaExceededError
from deepedge.service.group_commit import SubmissionCommitter
from deepedge.service.records import JobRecord
from deepedge.service.store import JobStore, Submission
from deepedge.service.wakeup import RemoteManager, WakePipe, listen


class CountingStore(JobStore):
    """A real store that also counts its group commits."""

    commits = 0

    def submit_many(self, submissions: list[Submission]):  # type: ignore[no-untyped-def]
        self.commits += 1
        time.sleep(0.02)  # a slow disk: submissions pile up behind the running commit
        return super().submit_many(submissions)


def test_a_batch_decides_each_submission_as_if_alone(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok", max_queued_jobs=3, max_cores=1.0)
    big = demo_manifest(learners=3)  # 1.5 cores: over the tenant's 1.0
    outcomes = store.submit_many([
        Submission(tenant, demo_manifest(), "k1"),
        Submission(tenant, demo_manifest(), "k1"),  # repeated key: the first job again
        Submission(tenant, big),
        Submission(tenant, demo_manifest()),
        Submission(tenant, demo_manifest()),
        Submission(tenant, demo_manifest()),  # the 4th unfinished job: over max_queued_jobs
    ])  # fmt: skip
    first, again = outcomes[0], outcomes[1]
    assert isinstance(first, tuple) and isinstance(again, tuple)
    assert first[1] and not again[1] and again[0].id == first[0].id
    assert isinstance(outcomes[2], QuotaExceededError)
    assert outcomes[2].fields["field"] == "resources"
    assert [isinstance(o, tuple) and o[1] for o in outcomes[3:5]] == [True, True]
    assert isinstance(outcomes[5], QuotaExceededError)
    assert len(store.list_jobs(tenant.id)) == 3


@pytest.mark.parametrize("page", [1, 3, 7])
def test_keyset_pages_cover_jobs_sharing_a_timestamp_exactly_once(
    store: JobStore, page: int
) -> None:
    tenant = store.create_tenant("alice", "tok")
    made: list[str] = []
    for _ in range(2):  # two batches: 10 jobs, two distinct timestamps
        for outcome in store.submit_many([Submission(tenant, demo_manifest())] * 5):
            assert isinstance(outcome, tuple)
            made.append(outcome[0].id)
    seen: list[JobRecord] = []
    before: float | None = None
    before_id: str | None = None
    while True:
        jobs = store.list_jobs(tenant.id, limit=page, before=before, before_id=before_id)
        seen += jobs
        if len(jobs) < page:
            break
        before, before_id = jobs[-1].created_at, jobs[-1].id
    assert sorted(j.id for j in seen) == sorted(made)
    keys = [(j.created_at, j.id) for j in seen]
    assert keys == sorted(keys, reverse=True)


def test_concurrent_submissions_share_commits_and_each_waits_for_its_own(tmp_path: Path) -> None:
    store = CountingStore(f"sqlite:///{tmp_path / 'service.db'}")
    store.migrate()
    tenant = store.create_tenant("alice", "tok")
    committer = SubmissionCommitter(store)

    async def submit_all() -> list[tuple[JobRecord, bool]]:
        async def one(i: int) -> tuple[JobRecord, bool]:
            job, created = await committer.submit(Submission(tenant, demo_manifest(), f"k{i}"))
            # Acknowledged: the row is committed and visible to any reader now.
            assert store.get(job.id).id == job.id
            return job, created

        return await asyncio.gather(*(one(i) for i in range(40)))

    try:
        results = asyncio.run(submit_all())
    finally:
        committer.stop()
    assert all(created for _, created in results)
    assert len({job.id for job, _ in results}) == 40
    assert len(store.list_jobs(tenant.id, limit=100)) == 40
    assert store.commits < 40  # batched: fewer commits than submissions
    store.dispose()


def test_a_refused_submission_does_not_fail_its_batch(tmp_path: Path) -> None:
    store = JobStore(f"sqlite:///{tmp_path / 'service.db'}")
    store.migrate()
    tenant = store.create_tenant("alice", "tok", max_cores=1.0)
    committer = SubmissionCommitter(store)

    async def submit_both() -> list[object]:
        return await asyncio.gather(
            committer.submit(Submission(tenant, demo_manifest(learners=3))),
            committer.submit(Submission(tenant, demo_manifest())),
            return_exceptions=True,
        )

    try:
        refused, accepted = asyncio.run(submit_both())
    finally:
        committer.stop()
    assert isinstance(refused, QuotaExceededError)
    assert isinstance(accepted, tuple) and accepted[1]
    assert [j.id for j in store.list_jobs(tenant.id)] == [accepted[0].id]
    store.dispose()


def test_wake_ups_cross_the_pipe(tmp_path: Path) -> None:
    pipe = WakePipe.create()
    woken = threading.Event()
    tenants: list[str] = []
    got_tenant = threading.Event()

    def submitted(tenant_id: str) -> None:
        tenants.append(tenant_id)
        got_tenant.set()

    listen(pipe.read_fd, woken.set, submitted)
    remote = RemoteManager(tmp_path, pipe.write_fd)
    remote.submitted("tenant-1")
    assert got_tenant.wait(5) and tenants == ["tenant-1"]
    assert not woken.is_set()
    remote.wake()
    assert woken.wait(5)
    for _ in range(100_000):  # nobody reads fast enough: a full pipe must not block or raise
        remote.wake()
    os.close(pipe.write_fd)


def test_recovery_events_are_read_from_the_managers_file(tmp_path: Path) -> None:
    from deepedge.service.durable_files import write_atomic
    from deepedge.service.wakeup import EVENTS_FILE

    remote = RemoteManager(tmp_path, WakePipe.create().write_fd)
    assert remote.recovery_events() == {}
    write_atomic(tmp_path / EVENTS_FILE, {"reattached": 2, "learner_restarted": 0})
    assert remote.recovery_events() == {"reattached": 2, "learner_restarted": 0}


def test_clearing_an_applied_request_keeps_a_newer_one(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest())
    store.request_action(job.id, "CHECKPOINT")
    store.request_action(job.id, "HALT")  # arrives while the checkpoint is being applied
    store.clear_request(job.id, "CHECKPOINT")
    assert store.get(job.id).requested_action == "HALT"
    store.clear_request(job.id, "HALT")
    assert store.get(job.id).requested_action is None


def test_the_write_lock_excludes_another_process_and_frees_on_its_death(tmp_path: Path) -> None:
    import subprocess
    import sys

    from deepedge.service.write_lock import WriteLock

    path = tmp_path / "db.writelock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = WriteLock(path)
        acquired = threading.Event()

        def take() -> None:
            with lock:
                acquired.set()

        threading.Thread(target=take, daemon=True).start()
        assert not acquired.wait(0.5)  # the other process holds it
        holder.kill()  # kill -9: the kernel releases its lock
        assert acquired.wait(5)
    finally:
        holder.kill()
        holder.wait()
