"""Per-job working directories and the files that outlive every process.

Layout under the service's data folder (the shared file system of the paper's helpers)::

    jobs/<tenant>/<job>/
        work/                      the learners' working directory (manifest paths are here)
        logs/learner-<rank>.log    stdout+stderr of every attempt, appended with markers
        status/learner-<rank>-<attempt>.pid / .exit   written by the collector
        checkpoints/*.ckpt         written by learners, registered and pruned by the service
        checkpoint.request         present = "please checkpoint now"
        metrics.jsonl              learner-reported metrics, one JSON object per line
        results/                   what STORING keeps

Status and exit files are written atomically (temp file, fsync, rename), so a reader never
sees half a record even if the writer is killed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from deepedge.core.errors import InvalidInputError
from deepedge.service.durable_files import read_json, write_atomic
from deepedge.service.manifest import check_relative_path

__all__ = ["JobDir", "Workspace", "read_json", "write_atomic"]


@dataclass(frozen=True)
class JobDir:
    root: Path

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def status(self) -> Path:
        return self.root / "status"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def checkpoint_request(self) -> Path:
        return self.root / "checkpoint.request"

    @property
    def metrics_file(self) -> Path:
        return self.root / "metrics.jsonl"

    def log_file(self, rank: int) -> Path:
        return self.logs / f"learner-{rank}.log"

    def pid_file(self, rank: int, attempt: int) -> Path:
        return self.status / f"learner-{rank}-{attempt}.pid"

    def exit_file(self, rank: int, attempt: int) -> Path:
        return self.status / f"learner-{rank}-{attempt}.exit"

    def create(self) -> None:
        for folder in (self.work, self.logs, self.status, self.checkpoints, self.results):
            folder.mkdir(parents=True, exist_ok=True, mode=0o750)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def resolve_inside(self, relative: str, base: Path | None = None) -> Path:
        """Resolve a manifest path against the job's work dir; symlinks may not escape it."""
        base = (base or self.work).resolve()
        try:
            candidate = (base / check_relative_path(relative)).resolve()
        except ValueError as exc:
            raise InvalidInputError(str(exc), field="path") from exc
        if not candidate.is_relative_to(self.work.resolve()):
            raise InvalidInputError(f"path {relative!r} escapes the job directory", field="path")
        return candidate


@dataclass(frozen=True)
class Workspace:
    """The data folder holding every job directory."""

    root: Path

    def job_dir(self, tenant_id: str, job_id: str) -> JobDir:
        for part in (tenant_id, job_id):
            if not part.isalnum():
                raise InvalidInputError(f"bad identifier {part!r}", field="id")
        return JobDir(self.root / "jobs" / tenant_id / job_id)
