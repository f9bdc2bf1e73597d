"""Feedback: the application's ground truth for requests the data plane served and sampled.

``POST /v2/models/<model>/feedback`` takes one label, ``{"request_id", "label"}``, or a
batch, ``{"labels": [{...}, ...]}``. Each entry names its request by the server's
``request_id`` (the answer's ``parameters.request_id``) or by the client's own ``id`` (the
request's ``id``, echoed as the answer's ``id``; with both, ``request_id`` is used). A
label is a class index or one of the model's class names.

A batch is all or nothing: every entry is checked here (a malformed entry or a label out of
range is a 400 or 422 for the whole batch), and the sample store writes the batch in one
transaction only when every entry names a stored sample
(:meth:`~deepedge.dataplane.sample_store.SampleStore.label_batch`); otherwise the answer is
a 404 naming the unknown ones (:func:`unknown_error`) and nothing is written.

Pure: bytes in, :class:`~deepedge.dataplane.sample_store.Feedback` out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from deepedge.core.errors import BadRequestError, InvalidInputError, NotFoundError
from deepedge.dataplane.sample_store import Feedback

NAMED_UNKNOWN = 5  # an answer names at most this many unknown requests
USAGE = 'feedback: {"request_id" or "id", "label"} or {"labels": [...]}'


def parse_feedback(body: bytes, class_names: Sequence[str]) -> tuple[Feedback, ...]:
    """Every entry of a feedback body, checked (module docstring)."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequestError(f"feedback is not JSON: {exc}") from exc
    entries = document.get("labels", [document]) if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise BadRequestError(USAGE)
    return tuple(_entry(i, entry, class_names) for i, entry in enumerate(entries))


def _entry(index: int, entry: Any, class_names: Sequence[str]) -> Feedback:
    where = f"labels[{index}]"
    if not isinstance(entry, dict):
        raise BadRequestError(f"{where}: {USAGE}", field=where)
    request_id, client_id = entry.get("request_id"), entry.get("id")
    for name, value in (("request_id", request_id), ("id", client_id)):
        if value is not None and not (isinstance(value, str) and value):
            raise BadRequestError(f"{where}.{name} must be a non-empty string", field=where)
    if request_id is None and client_id is None:
        raise BadRequestError(f"{where} needs a request_id or the request's id", field=where)
    label = entry.get("label")
    if isinstance(label, str) and label in class_names:
        label = class_names.index(label)
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(class_names):
        raise InvalidInputError(
            f"feedback: label {label!r} is not one of the model's {len(class_names)} classes "
            f"(0-{len(class_names) - 1} or a class name)",
            field="label",
        )
    if request_id is not None:
        return Feedback(label, request_id=request_id)
    return Feedback(label, client_id=client_id)


def unknown_error(unknown: Sequence[str]) -> NotFoundError:
    """The 404 of a batch with entries that name no sampled request."""
    named = ", ".join(unknown[:NAMED_UNKNOWN])
    more = len(unknown) - NAMED_UNKNOWN
    return NotFoundError(
        f"no sampled request {named}"
        + (f" (and {more} more)" if more > 0 else "")
        + '; nothing was labelled: only sampled requests ("sampled": true) take feedback',
        unknown=list(unknown),
    )
