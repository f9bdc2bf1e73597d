"""Per-job working directories and the files that outlive every process.

Layout under the service's data folder (the shared file system of the paper's helpers)::

    jobs/<tenant>/<job>/
        work/                      the learners' working directory (manifest paths are here)
        results/                   what the learners leave (result.json, metrics.jsonl, ...)
        checkpoints/*.ckpt         written by learners, registered and pruned by the service
        checkpoints/.request       present = "please checkpoint now"
        logs/learner-<rank>.log    stdout+stderr of every attempt, appended with markers
        status/learner-<rank>-<attempt>.pid / .exit / .env   the collector's records, and
                                   the environment it starts the learner with
        summary.json               what STORING recorded

The first three are the tenant's (owned by its sandbox user; the only folders its
sandbox can write, :meth:`JobDir.tenant_writable`); the others the service's, never
visible in a sandbox. Everything the service reads back from the tenant's folders goes
through :meth:`JobDir.read_tenant_file`, which refuses symbolic links on the whole way:
tenant code could point one at another tenant's files or the store.

Status and exit files are written atomically (temp file, fsync, rename), so a reader never
sees half a record even if the writer is killed.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
        return self.checkpoints / ".request"

    @property
    def metrics_file(self) -> Path:
        return self.results / "metrics.jsonl"

    @property
    def summary_file(self) -> Path:
        return self.root / "summary.json"

    def tenant_writable(self) -> list[Path]:
        """The folders the tenant's code may write (its sandbox's writable binds)."""
        return [self.work, self.results, self.checkpoints]

    def env_file(self, rank: int, attempt: int) -> Path:
        return self.status / f"learner-{rank}-{attempt}.env"

    def log_file(self, rank: int) -> Path:
        return self.logs / f"learner-{rank}.log"

    def pid_file(self, rank: int, attempt: int) -> Path:
        return self.status / f"learner-{rank}-{attempt}.pid"

    def exit_file(self, rank: int, attempt: int) -> Path:
        return self.status / f"learner-{rank}-{attempt}.exit"

    def create(self) -> None:
        for folder in (self.work, self.logs, self.status, self.checkpoints, self.results):
            folder.mkdir(parents=True, exist_ok=True, mode=0o750)

    def read_tenant_file(self, relative: str, limit_b: int | None = None) -> bytes:
        """A file under the job folder that tenant code may have written, read without
        following any symbolic link (``FileNotFoundError`` if absent, ``OSError`` for a
        link or anything but a regular file); at most ``limit_b`` bytes."""
        with open_inside(self.root, relative) as handle:
            return handle.read() if limit_b is None else handle.read(limit_b)

    def tenant_file_size(self, relative: str) -> int:
        with open_inside(self.root, relative) as handle:
            return os.fstat(handle.fileno()).st_size

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


def open_inside(root: Path, relative: str) -> BinaryIO:
    """Open ``root/relative`` for reading, every component with ``O_NOFOLLOW`` from the
    folder before it: no symbolic link is followed anywhere (``..`` is refused too)."""
    parts = [p for p in relative.split("/") if p not in {"", "."}]
    if not parts or ".." in parts:
        raise OSError(errno.EINVAL, f"bad path {relative!r}")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise OSError(errno.EINVAL, f"{relative} is not a regular file")
    return os.fdopen(file_fd, "rb")


@dataclass(frozen=True)
class Workspace:
    """The data folder holding every job directory."""

    root: Path

    def job_dir(self, tenant_id: str, job_id: str) -> JobDir:
        for part in (tenant_id, job_id):
            if not part.isalnum():
                raise InvalidInputError(f"bad identifier {part!r}", field="id")
        return JobDir(self.root / "jobs" / tenant_id / job_id)


LOG_TAIL_LINES = 8


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` non-empty lines of a log (from its last 4 KiB), joined by " | "."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(handle.tell() - 4096, 0))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(line for line in text.splitlines()[-lines:] if line.strip())
