"""Files that are whole or absent: written to a temporary file, fsync'd, renamed over the
target, and the folder fsync'd, so a killed writer never leaves half a file behind and a
file that exists once this returns survives a power cut. Standard library only."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path`` whole or not at all, durable once this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
