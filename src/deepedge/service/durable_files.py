"""Small records on disk that survive a killed writer: write to a temp file, fsync, rename.

Standard library only: the collector imports this and must start fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, payload: dict[str, Any], mode: int = 0o644) -> None:
    """``payload`` as JSON at ``path``, whole or not at all. The temporary file is created
    anew (``O_EXCL | O_NOFOLLOW``): a link planted at its name by tenant code in a folder
    it can write makes the write fail instead of landing where the link points."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(tmp, flags, mode), "w", encoding="utf-8") as handle:
        json.dump(payload, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_private(path: Path, payload: dict[str, Any]) -> None:
    """As :func:`write_atomic`, readable by the owner only (a learner's environment holds
    its job's token)."""
    write_atomic(path, payload, mode=0o600)


def take_json(path: Path) -> dict[str, Any]:
    """Read a record and remove it (a learner's environment, read once by its starter)."""
    data = read_json(path)
    if data is None:
        raise OSError(f"cannot read {path}")
    path.unlink(missing_ok=True)
    return data
