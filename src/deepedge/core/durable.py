"""Files that are whole or absent: written to a temporary file, fsync'd, renamed over the
target, and the folder fsync'd, so a killed writer never leaves half a file behind and a
file that exists once this returns survives a power cut; and folders only the service's
user may enter (what holds tenants' data). Standard library only."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """``data`` at ``path`` whole or not at all, durable once this returns; the file gets
    ``mode`` (None: the umask's default) from its first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    with os.fdopen(os.open(tmp, flags, 0o666 if mode is None else mode), "wb") as handle:
        if mode is not None:
            os.fchmod(handle.fileno(), mode)  # (a temporary file left by a killed writer)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def private_folder(path: Path, mode: int = 0o700) -> Path:
    """``path`` as a folder only its owner may enter (``mode``): created so (its missing
    parents at the umask's default, as ``mkdir -p``), or narrowed to it when it exists
    wider (made by an older deepedge at the umask's 0755). The files inside are then out
    of other users' reach whatever their own modes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # (made meanwhile, or there before)
        path.mkdir(mode=mode)
    if path.stat().st_mode & 0o777 != mode:
        os.chmod(path, mode)
    return path
