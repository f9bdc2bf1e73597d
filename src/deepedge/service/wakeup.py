"""Wake-ups from the API process to the manager process, through one pipe.

When the service runs the API and the lifecycle manager as two processes (so the manager's
work never holds the API's interpreter lock), the API still has to say "a job was
submitted" or "a user asked for a halt" at once, or every admission would wait for the
manager's next tick. Each wake-up is one line written to a pipe the supervisor created
before forking both: ``*`` (look at everything) or a tenant id (that tenant queued a job).
Writes are non-blocking and shorter than ``PIPE_BUF``, so they are atomic; a full pipe
means wake-ups are already pending, and dropping one loses nothing (the manager's tick is
level-triggered and also runs every ``tick_s``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepedge.service.durable_files import read_json
from deepedge.service.records import JobRecord
from deepedge.service.workspace import JobDir, Workspace

log = logging.getLogger(__name__)

EVERYTHING = b"*"
EVENTS_FILE = "manager-events.json"


@dataclass(frozen=True)
class WakePipe:
    read_fd: int
    write_fd: int

    @classmethod
    def create(cls) -> WakePipe:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        return cls(read_fd, write_fd)


class RemoteManager:
    """What the API process needs from a manager that runs in another process."""

    def __init__(self, data_dir: Path, write_fd: int) -> None:
        self.workspace = Workspace(data_dir)
        self.events_path = data_dir / EVENTS_FILE
        self._fd = write_fd

    def _send(self, line: bytes) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self._fd, line + b"\n")

    def wake(self) -> None:
        self._send(EVERYTHING)

    def submitted(self, tenant_id: str) -> None:
        self._send(tenant_id.encode("ascii", "replace"))

    def job_dir(self, job: JobRecord) -> JobDir:
        return self.workspace.job_dir(job.tenant_id, job.id)

    def recovery_events(self) -> dict[str, int]:
        """The manager process's counters, as it last published them."""
        counts = read_json(self.events_path) or {}
        return {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}


def listen(
    read_fd: int, wake: Callable[[], None], submitted: Callable[[str], None]
) -> threading.Thread:
    """Deliver the pipe's wake-ups to a manager (a daemon thread in the manager process)."""

    def run() -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(read_fd, 65536)
            except InterruptedError:
                continue
            except OSError as exc:
                log.warning("wake-up pipe closed: %s", exc)
                return
            if not chunk:  # every writer is gone (the supervisor ended)
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in set(lines):  # a burst of identical wake-ups is one
                if line == EVERYTHING:
                    wake()
                elif line:
                    submitted(line.decode("ascii", "replace"))

    thread = threading.Thread(target=run, name="deepedge-wakeups", daemon=True)
    thread.start()
    return thread
