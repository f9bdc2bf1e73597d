"""Checkpoints: the learner-side agent and the service-side registry with retention.

Contract between service and learner (any framework):

* ``DEEPEDGE_CHECKPOINT_DIR``: where the learner writes ``<name>.ckpt`` files, atomically.
* ``DEEPEDGE_CHECKPOINT_REQUEST``: a file the service creates every
  ``checkpoint_interval_s`` (periodic) or when a user asks (on demand); the learner saves a
  checkpoint when it sees it, then removes it.
* ``DEEPEDGE_RESUME_FROM``: set on a restart or resume to the newest checkpoint; the learner
  continues from it.

The service registers new ``.ckpt`` files in the store and keeps the newest
``checkpoint_retention`` of them, deleting older ones (files and rows).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the learner side imports this module: keep it standard-library only
    from deepedge.service.records import JobId
    from deepedge.service.store import JobStore
    from deepedge.service.workspace import JobDir

log = logging.getLogger(__name__)

SUFFIX = ".ckpt"


@dataclass
class CheckpointAgent:
    """What a learner uses: ``if agent.requested(): agent.save(state)``; ``agent.resume()``."""

    directory: Path
    request_file: Path
    resume_from: Path | None

    @classmethod
    def from_env(cls) -> CheckpointAgent:
        directory = Path(os.environ.get("DEEPEDGE_CHECKPOINT_DIR", "checkpoints"))
        request = Path(os.environ.get("DEEPEDGE_CHECKPOINT_REQUEST", directory / "request"))
        resume = os.environ.get("DEEPEDGE_RESUME_FROM")
        return cls(directory, request, Path(resume) if resume else None)

    def requested(self) -> bool:
        return self.request_file.exists()

    def save(self, payload: bytes) -> Path:
        """Write ``payload`` as a new checkpoint (temp, fsync, rename) and clear the request."""
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"ckpt-{time.time_ns():020d}{SUFFIX}"
        final = self.directory / name
        tmp = self.directory / f".{name}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        self.request_file.unlink(missing_ok=True)
        return final

    def resume(self) -> bytes | None:
        """The checkpoint to continue from, if the service handed one over."""
        if self.resume_from is None or not self.resume_from.is_file():
            return None
        return self.resume_from.read_bytes()


def checkpoint_files(job_dir: JobDir) -> list[Path]:
    """Completed checkpoints, oldest first (names sort by creation time): regular files
    only (the folder is the tenant's: a link there could point anywhere)."""
    if not job_dir.checkpoints.is_dir() or job_dir.checkpoints.is_symlink():
        return []
    return sorted(
        p for p in job_dir.checkpoints.iterdir()
        if p.name.endswith(SUFFIX) and stat.S_ISREG(p.lstat().st_mode)
    )  # fmt: skip


def latest_checkpoint(job_dir: JobDir) -> Path | None:
    files = checkpoint_files(job_dir)
    return files[-1] if files else None


def request_checkpoint(job_dir: JobDir) -> None:
    """Create the request file; never through a link tenant code put at its name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        os.close(os.open(job_dir.checkpoint_request, flags, 0o644))
    except OSError as exc:
        log.warning("cannot request a checkpoint in %s: %s", job_dir.root, exc)


def sync_checkpoints(store: JobStore, job_id: JobId, job_dir: JobDir, retention: int) -> int:
    """Register new checkpoint files and prune beyond ``retention``; returns how many are new."""
    known = {c.name for c in store.checkpoints(job_id)}
    files = checkpoint_files(job_dir)
    added = 0
    for path in files:
        if path.name not in known:
            info = path.lstat()
            added += int(store.add_checkpoint(job_id, path.name, info.st_size, info.st_mtime))
    excess = files[:-retention] if len(files) > retention else []
    if excess:
        for path in excess:
            path.unlink(missing_ok=True)
        store.drop_checkpoints(job_id, [p.name for p in excess])
    gone = known - {p.name for p in files}
    if gone:
        store.drop_checkpoints(job_id, gone)
    return added
