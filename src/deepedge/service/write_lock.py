"""One writer at a time on an SQLite file, across threads *and* processes.

The API process and the manager process both write the embedded store. SQLite alone
would make a writer that finds the file locked poll with sleeps growing to 100 ms (its busy
handler), so a submission arriving while the manager commits a few transitions back to
back could wait far longer than the commits themselves. Here a writer first takes a
thread lock (threads of one process share their open file, which ``flock`` cannot tell
apart), then an exclusive ``flock`` on a side file: the kernel wakes a waiter as soon as the
holder releases it, and a killed holder (even ``kill -9``) releases it with its process.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType


class WriteLock:
    def __init__(self, path: Path | None) -> None:
        """``path``: the side file to ``flock``; None locks the threads of this process only."""
        self._path = path
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._fd_pid = 0

    def _file(self) -> int | None:
        """This process's own descriptor: one inherited across ``fork`` would share its lock
        with the parent (flock locks belong to the open file, not the process)."""
        if self._path is None:
            return None
        if self._fd is None or self._fd_pid != os.getpid():
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fd_pid = os.getpid()
        return self._fd

    def __enter__(self) -> WriteLock:
        self._thread_lock.acquire()
        try:
            fd = self._file()
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self._fd is not None and self._fd_pid == os.getpid():
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()
