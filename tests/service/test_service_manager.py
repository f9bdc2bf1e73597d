"""The lifecycle with real learner processes: completion, crashes, limits, halt, checkpoints."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import pytest
from _service_helpers import demo_manifest, learner_pids, tick_until

from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Action, Manager
from deepedge.service.manifest import parse_manifest
from deepedge.service.status import ErrorCode, JobStatus
from deepedge.service.store import JobStore

S = JobStatus


def _status(store: JobStore, job_id: str) -> JobStatus:
    return store.get(job_id).status


def test_command_job_runs_to_completion_with_history(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    job, _ = store.submit(store.create_tenant("a", "t"), demo_manifest(steps=3))
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: _status(store, job.id) is S.COMPLETED, 60)
    assert [h.status for h in store.history(job.id)] == [
        S.QUEUED, S.PENDING, S.DEPLOYING, S.PROCESSING, S.STORING, S.COMPLETED]  # fmt: skip
    job_dir = manager.job_dir(job)
    log = job_dir.log_file(0).read_text()
    assert "done after 3 steps" in log and "exit code 0" in log
    assert job_dir.summary_file.exists()


def test_killed_learner_restarts_from_its_checkpoint(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    manifest = demo_manifest(steps=400, step_s=0.05, checkpoint_interval_s=0.2)
    job, _ = store.submit(store.create_tenant("a", "t"), manifest)
    manager = Manager(store, settings)
    job_dir = manager.job_dir(job)
    try:
        assert tick_until(manager, lambda: any(job_dir.checkpoints.glob("*.ckpt")), 60)
        (victim,) = learner_pids(job_dir)
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        assert tick_until(manager, lambda: learner_pids(job_dir) not in ([], [victim]), 30)
        assert time.monotonic() - killed < 20.0  # prompt, with room for a slow, noisy CI host
        restarted = [h for h in store.history(job.id) if h.status is S.RESTARTED]
        assert len(restarted) == 1 and "killed by signal 9" in (restarted[0].cause or "")
        assert "from checkpoint ckpt-" in (restarted[0].cause or "")
        assert tick_until(manager, lambda: "attempt 1 started" in job_dir.log_file(0).read_text()
                          and "starting at step" in job_dir.log_file(0).read_text().split(
                              "attempt 1 started")[-1], 30)  # fmt: skip
        resumed = job_dir.log_file(0).read_text().split("attempt 1 started")[-1]
        assert int(re.search(r"starting at step (\d+)", resumed).group(1)) > 0  # type: ignore[union-attr]
        assert store.get(job.id).restarts == 1
    finally:
        store.request_action(job.id, Action.HALT.value)
        tick_until(manager, lambda: _status(store, job.id) is S.HALTED, 30)
    assert learner_pids(job_dir) == []


def test_restart_limit_ends_in_failed_with_the_learners_last_words(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    manifest = demo_manifest(steps=5, restart_limit=1, extra_argv=["--fail-at-step", "0"])
    job, _ = store.submit(store.create_tenant("a", "t"), manifest)
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: _status(store, job.id) is S.FAILED, 60)
    failed = store.get(job.id)
    assert failed.error_code == ErrorCode.RESTARTS_EXHAUSTED
    assert "failing on purpose" in (failed.error_message or "")
    assert f"deepedge jobs logs {job.id}" in (failed.error_message or "")
    assert [h.status for h in store.history(job.id)].count(S.RESTARTED) == 1


def test_learner_memory_limit_is_enforced(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    manifest = parse_manifest({
        "name": "hog", "kind": "command", "restart_limit": 0,
        "resources": {"mem_mb": 256},
        "spec": {"argv": [sys.executable, "-c", "x = bytearray(1024 * 1024 * 1024)"]},
    })  # fmt: skip
    job, _ = store.submit(store.create_tenant("a", "t"), manifest)
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: _status(store, job.id) is S.FAILED, 60)
    assert "MemoryError" in (store.get(job.id).error_message or "")


def test_halt_then_resume_continues_from_the_newest_checkpoint(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    manifest = demo_manifest(steps=30, step_s=0.05, checkpoint_interval_s=0.2)
    job, _ = store.submit(store.create_tenant("a", "t"), manifest)
    manager = Manager(store, settings)
    job_dir = manager.job_dir(job)
    assert tick_until(manager, lambda: any(job_dir.checkpoints.glob("*.ckpt")), 60)
    store.request_action(job.id, Action.HALT.value)
    assert tick_until(manager, lambda: _status(store, job.id) is S.HALTED, 30)
    assert learner_pids(job_dir) == []
    store.transition(job.id, S.QUEUED, "resumed", expected=S.HALTED)
    assert tick_until(manager, lambda: _status(store, job.id) is S.COMPLETED, 60)
    text = job_dir.log_file(0).read_text()
    starts = [int(s) for s in re.findall(r"starting at step (\d+)", text)]
    assert starts[0] == 0 and starts[-1] > 0


def test_checkpoints_on_demand_and_retention(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    manifest = demo_manifest(steps=40, step_s=0.05, checkpoint_interval_s=3600,
                             checkpoint_retention=2)  # fmt: skip
    job, _ = store.submit(store.create_tenant("a", "t"), manifest)
    manager = Manager(store, settings)
    job_dir = manager.job_dir(job)
    assert tick_until(manager, lambda: _status(store, job.id) is S.PROCESSING, 60)
    for _ in range(3):
        before = set(job_dir.checkpoints.glob("*.ckpt"))
        store.request_action(job.id, Action.CHECKPOINT.value)
        assert tick_until(manager, lambda b=before: set(job_dir.checkpoints.glob("*.ckpt")) - b, 30)
    assert tick_until(manager, lambda: _status(store, job.id) is S.COMPLETED, 60)
    files = sorted(p.name for p in job_dir.checkpoints.glob("*.ckpt"))
    assert len(files) == 2
    assert sorted(c.name for c in store.checkpoints(job.id)) == files


@pytest.mark.parametrize("active_limit", [1, 2])
def test_quota_admits_only_as_many_jobs_as_allowed(
    settings: ServiceSettings, sqlite_store: JobStore, active_limit: int
) -> None:
    store = sqlite_store
    tenant = store.create_tenant("a", "t", max_active_jobs=active_limit)
    jobs = [store.submit(tenant, demo_manifest(steps=1000))[0] for _ in range(3)]
    manager = Manager(store, settings)
    try:
        for _ in range(10):
            manager.tick()
        running = [j for j in jobs if _status(store, j.id) is S.PROCESSING]
        assert len(running) == active_limit
        assert all(_status(store, j.id) is S.QUEUED for j in jobs[active_limit:])
    finally:
        for j in jobs:
            store.request_action(j.id, Action.HALT.value)
        tick_until(manager, lambda: all(_status(store, j.id) is S.HALTED for j in jobs), 30)
