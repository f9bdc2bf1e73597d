"""The data plane's URL space: which paths exist and the methods each takes.

Server-wide (the front application): ``GET /v2`` (server metadata), ``GET
/v2/health/live`` and ``GET /v2/health/ready`` (:func:`server_route`). Under a model's
prefix ``/v2/models/<model>`` (its replicas; :func:`model_route`):

===========================  ======  ==================================================
suffix                       method  answer
===========================  ======  ==================================================
``""``                       GET     model metadata
``/ready``                   GET     ``{"name", "ready": true}``
``/config``                  GET     Triton's model configuration
``/stats``                   GET     Triton's model statistics (not per version)
``/infer``                   POST    inference
``/feedback``                POST    labels for served requests (not per version)
``/versions/<v>/...``                the same, pinned to version ``<v>`` where allowed
===========================  ======  ==================================================

A path not in the table is a 404; a path in it asked with another method is a 405 naming
the methods it takes (:class:`~deepedge.core.errors.MethodNotAllowedError`), as KServe and
Triton answer. Pure: strings in, the action out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deepedge.core.errors import MethodNotAllowedError, NotFoundError
from deepedge.dataplane.model_reports import live_document, ready_document
from deepedge.dataplane.protocol import server_metadata

SERVER_VERSION = "1"
SERVER_DOCUMENTS: dict[str, Callable[[], dict[str, Any]]] = {
    "/v2": lambda: server_metadata(SERVER_VERSION),
    "/v2/health/live": live_document,
    "/v2/health/ready": ready_document,
}
MODEL_METHODS: dict[str, tuple[str, ...]] = {
    "": ("GET",),
    "ready": ("GET",),
    "config": ("GET",),
    "stats": ("GET",),
    "infer": ("POST",),
    "feedback": ("POST",),
}
NOT_PER_VERSION = frozenset({"stats", "feedback"})


@dataclass(frozen=True)
class ModelAction:
    """What a request under a model's prefix asks: an action of :data:`MODEL_METHODS`,
    pinned to a version or not."""

    action: str
    pinned: int | None


def _check_method(method: str, allowed: tuple[str, ...], path: str) -> None:
    if method not in allowed:
        raise MethodNotAllowedError(
            f"{method} {path}: this route takes {', '.join(allowed)}", allowed
        )


def server_route(path: str, method: str) -> dict[str, Any] | None:
    """The document a server-wide path answers (None: not a server-wide path)."""
    path = path.rstrip("/")
    document = SERVER_DOCUMENTS.get(path)
    if document is None:
        return None
    _check_method(method, ("GET",), path)
    return document()


def model_route(suffix: str, method: str) -> ModelAction:
    """The action of a path below a model's prefix: ``/versions/3/infer`` -> (``infer``,
    3); ``/infer`` -> (``infer``, None); ``""`` -> metadata."""
    parts = [p for p in suffix.split("/") if p]
    pinned = None
    if len(parts) >= 2 and parts[0] == "versions":
        try:
            pinned = int(parts[1])
        except ValueError as exc:
            raise NotFoundError(f"unknown version {parts[1]!r}") from exc
        parts = parts[2:]
    action = parts[0] if len(parts) == 1 else "" if not parts else None
    allowed = MODEL_METHODS.get(action) if action is not None else None
    if allowed is None or (pinned is not None and action in NOT_PER_VERSION):
        raise NotFoundError(f"unknown path {suffix!r} in this protocol")
    _check_method(method, allowed, suffix or "/")
    return ModelAction(action or "", pinned)
