"""Ray's own messages go to a debug log, never to a command's output or a job's log.

``import ray`` gives the ``ray`` logger a handler that writes to stderr, and ``ray.init``
warns there about things deepedge decides on purpose (the file-descriptor limit a learner
runs under, token authentication being on). On a terminal that is noise above a progress
bar; in a learner it is the first lines of every job log. :func:`divert` replaces that
handler with one that appends to the debug log: ``$DEEPEDGE_DEBUG_LOG``, else
``$XDG_STATE_HOME/deepedge/debug.log`` (``~/.local/state/deepedge/debug.log``); a learner
sets the variable to ``debug.log`` in its job's work folder. deepedge's own warnings keep
their usual place. The output of a ``ray start`` that ``deepedge agent`` runs goes to a file
beside the debug log (:func:`ray_start_log_path`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

DEBUG_LOG_ENV = "DEEPEDGE_DEBUG_LOG"
RAY_LOGGERS = ("ray", "ray._private")  # see divert
FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


def keep_beside_job() -> None:
    """A learner's (run in its job's work folder): Ray's messages go to ``debug.log`` there,
    unless the operator named a debug log."""
    os.environ.setdefault(DEBUG_LOG_ENV, str(Path("debug.log").absolute()))


def debug_log_path() -> Path:
    chosen = os.environ.get(DEBUG_LOG_ENV)
    if chosen:
        return Path(chosen).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "deepedge" / "debug.log"


def ray_start_log_path(node_id: str) -> Path:
    """Where the output of the ``ray start`` an agent runs for ``node_id`` goes: beside the
    debug log. Ray's banner there tells the operator to run ``ray stop``, which stops every
    Ray of the machine; it is kept, not shown."""
    return debug_log_path().with_name(f"ray-start-{node_id}.log")


class _DebugLog(logging.FileHandler):
    """The handler :func:`divert` installs (told apart from Ray's own by its type)."""


def divert() -> Path | None:
    """Send the records of Ray's loggers to the debug log (idempotent); the log's path, or
    None when it cannot be written (then the records are dropped, not printed).

    Both ``ray`` and ``ray._private`` get the handler: ``ray.init(configure_logging=False)``
    clears the ``ray`` logger's handlers before it warns, and a record that finds no handler
    at all is printed on stderr by Python's last resort. Call it again after ``ray.init``.
    """
    path = debug_log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        path_ok = False
    else:
        path_ok = True
    for name in RAY_LOGGERS:
        _divert_one(logging.getLogger(name), path if path_ok else None)
    return path if path_ok else None


def _divert_one(logger: logging.Logger, path: Path | None) -> None:
    mine = [h for h in logger.handlers if isinstance(h, _DebugLog)]
    for handler in list(logger.handlers):
        if not isinstance(handler, _DebugLog | logging.NullHandler):
            logger.removeHandler(handler)
    logger.propagate = False
    if path is not None and mine and Path(mine[0].baseFilename) == path.absolute():
        return
    for handler in mine:
        logger.removeHandler(handler)
        handler.close()
    if path is None:
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
        return
    for handler in [h for h in logger.handlers if isinstance(h, logging.NullHandler)]:
        logger.removeHandler(handler)
    handler = _DebugLog(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
