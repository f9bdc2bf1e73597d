"""Limits enforced on real sandboxed jobs: memory of all their processes and their tmpfs
(the memory cgroup), their tenant's disk quota (the collector's count of the job's folder,
and the manager's of the tenant's folders); a job stopped by one ends FAILED saying which."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import pytest
from _service_helpers import tick_until

from deepedge.core import memory_cgroup
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Manager
from deepedge.service.manifest import parse_manifest
from deepedge.service.status import ErrorCode, JobStatus
from deepedge.service.store import JobStore

S = JobStatus
UNAVAILABLE = memory_cgroup.unavailable_reason()

# three processes of 150 MB each: every one within RLIMIT_AS 256 MB, together past it
PROCESSES = """
import subprocess, sys
hold = "b = b'x' * (150 << 20); import time; time.sleep(3)"
kids = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(3)]
sys.exit(1 if any(k.wait() for k in kids) else 0)
"""
# 200 MB into /tmp and 200 MB into /dev/shm: each within its tmpfs, together past mem_mb
TMPFS = """
for where in ("/tmp/fill", "/dev/shm/fill"):
    with open(where, "wb") as f:
        for _ in range(200):
            f.write(b"x" * (1 << 20)); f.flush()
print("filled")
"""
WITHIN = "b = b'x' * (64 << 20); print('held 64 MB')"
# its children past the limit together: one is killed; the learner goes on and ends well
SURVIVOR = """
import subprocess, sys
hold = "b = b'x' * (150 << 20); import time; time.sleep(2)"
kids = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(3)]
print("children ended", sorted(k.wait() for k in kids))
"""


def _job(code: str, mem_mb: int = 256, **fields: object) -> object:
    return parse_manifest({
        "name": "limits", "kind": "command", "restart_limit": 2,
        "resources": {"mem_mb": mem_mb, "cpus": 0.5},
        "spec": {"argv": [sys.executable, "-c", code]},
        **fields,
    })  # fmt: skip


@pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no memory cgroup: {UNAVAILABLE}")
@pytest.mark.parametrize(
    ("code", "status", "log_says"),
    [(PROCESSES, S.FAILED, None), (TMPFS, S.FAILED, None), (WITHIN, S.COMPLETED, None),
     (SURVIVOR, S.COMPLETED, "children ended [-9")],
    ids=["processes", "tmpfs", "within", "survivor"],
)  # fmt: skip
def test_memory_of_all_a_jobs_processes_and_its_tmpfs_is_bounded(
    settings: ServiceSettings,
    sqlite_store: JobStore,
    code: str,
    status: JobStatus,
    log_says: str | None,
) -> None:
    """Past its ``mem_mb`` a job ends FAILED at once (no restart: it would meet the same
    limit) with the limit and the peak in its status, its history and its log; a learner
    that goes on after the kernel killed one of its processes completes, its log says so."""
    store = sqlite_store
    job, _ = store.submit(store.create_tenant("a", "t"), _job(code))  # type: ignore[arg-type]
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: store.get(job.id).status in {S.FAILED, S.COMPLETED}, 90)
    ended = store.get(job.id)
    assert ended.status is status, ended.error_message
    log = manager.job_dir(job).log_file(0).read_text()
    if status is S.COMPLETED:
        if log_says is None:
            assert "memory limit" not in log
        else:
            assert log_says in log
            assert "memory limit 256 MB reached" in log and "the kernel killed" in log
        return
    assert ended.error_code == ErrorCode.MEMORY_LIMIT
    assert ended.restarts == 0
    reason = re.search(r"memory limit 256 MB reached \(peak (\d+) MB\)", ended.error_message or "")
    assert reason is not None, ended.error_message
    assert int(reason.group(1)) <= 256
    assert reason.group(0) in (store.history(job.id)[-1].cause or "")
    assert reason.group(0) in log and "filled" not in log


LOGGED_WRITER = """
import time
n = 0
while n < 400:
    with open(f"f{n}", "wb") as f:
        f.write(b"x" * (1 << 20))
    n += 1
    print(f"t={time.time():.3f} mb={n}", flush=True)
    time.sleep(0.01)
"""


def test_a_job_past_its_tenants_disk_quota_is_stopped_within_its_poll(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    """The collector counts the job's folder every JOB_POLL_S (0.1 s): a job writing about
    100 MB/s is stopped within a second of passing the quota (room for a loaded host),
    FAILED with the tenant's figures."""
    settings = dataclasses.replace(settings, disk_poll_s=3600.0)  # the collector's count only
    store = sqlite_store
    tenant = store.create_tenant("a", "t", max_disk_mb=32)
    job, _ = store.submit(tenant, _job(LOGGED_WRITER, mem_mb=1024))  # type: ignore[arg-type]
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: store.get(job.id).status is S.FAILED, 90)
    ended = store.get(job.id)
    assert ended.error_code == ErrorCode.DISK_QUOTA, ended.error_message
    assert ended.restarts == 0
    assert re.search(r"disk quota of tenant a reached \((\d+) MB of 32 MB\)",
                     ended.error_message or "")  # fmt: skip
    job_dir = manager.job_dir(job)
    written = [
        (float(m.group(1)), int(m.group(2)))
        for m in re.finditer(r"t=([\d.]+) mb=(\d+)", job_dir.log_file(0).read_text())
    ]
    crossed = next(t for t, mb in written if mb >= 32)  # the folder held 32 MB by then
    stopped = json.loads(job_dir.exit_file(0, 0).read_text())["ended_at"]
    assert stopped - crossed < 1.0  # measured here: 0.03-0.05 s
    assert max(mb for _, mb in written) < 32 + 100


SLEEPER = "import time; time.sleep(60)"


def test_a_tenant_over_quota_has_its_running_jobs_stopped_and_its_queue_held(
    tmp_path: Path, sqlite_store: JobStore
) -> None:
    """Files of the tenant outside any job (a deployment's) pass its quota: the manager's
    count stops its running job FAILED, holds its queued job, and admits it once the
    tenant is under its quota again."""
    settings = ServiceSettings(data_dir=tmp_path / "data", tick_s=0.05, disk_poll_s=0.2,
                               halt_grace_s=1.0)  # fmt: skip
    store = sqlite_store
    tenant = store.create_tenant("a", "t", max_disk_mb=16)
    running, _ = store.submit(tenant, _job(SLEEPER, mem_mb=1024))  # type: ignore[arg-type]
    manager = Manager(store, settings)
    assert tick_until(manager, lambda: store.get(running.id).status is S.PROCESSING, 60)
    blob = settings.data_dir / "deployments" / tenant.id / "d1" / "model.bin"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"x" * (24 << 20))
    filled = time.monotonic()
    assert tick_until(manager, lambda: store.get(running.id).status is S.FAILED, 30)
    assert time.monotonic() - filled < 10.0
    ended = store.get(running.id)
    assert ended.error_code == ErrorCode.DISK_QUOTA
    assert "disk quota of tenant a reached (24 MB of 16 MB)" in (ended.error_message or "")
    queued, _ = store.submit(tenant, _job("print('ran')", mem_mb=1024))  # type: ignore[arg-type]
    for _ in range(20):
        manager.tick()
        time.sleep(0.05)
    assert store.get(queued.id).status is S.QUEUED
    blob.unlink()
    assert tick_until(manager, lambda: store.get(queued.id).status is S.COMPLETED, 60)
