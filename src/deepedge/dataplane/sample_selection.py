"""Which of a deployment's stored samples an export or a deletion names.

A sample is selected when the time it was served, ``at`` (seconds since the epoch), lies in
``[since, until)`` (an end left out is open) and, when ``request_ids`` are given, its
request id is one of them. A selection is checked when it is made: ends that are not finite
numbers, ``since`` after ``until`` and an empty or oversized list of ids are refused with
an :class:`~deepedge.core.errors.InvalidInputError` naming the field (HTTP 422).

A deletion must say what it deletes (:func:`deletion`): the ids, a range, or ``all`` of
them, one of the three, so a request that names nothing never empties a deployment.

The selection's SQL (:meth:`SampleSelection.where`) and the deletion's (:func:`delete`) run
on a connection of :class:`~deepedge.dataplane.sample_store.SampleStore`, in its
transaction; the ids travel as one JSON parameter, so a long list meets no limit of bound
variables.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import Any

from deepedge.core.errors import InvalidInputError

MAX_REQUEST_IDS = 10_000  # in one deletion (the body limit bounds the rest)
MAX_REQUEST_ID_CHARS = 128  # the server's ids are 32 hex digits, a batch item's "-<index>" more


@dataclass(frozen=True)
class SampleSelection:
    """Samples served in ``[since, until)`` whose request id is one of ``request_ids``
    (``None``: any); the default selects every sample."""

    since: float | None = None
    until: float | None = None
    request_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for field, value in (("since", self.since), ("until", self.until)):
            if value is not None and not math.isfinite(value):
                raise InvalidInputError(f"{field} must be a finite number of seconds, got "
                                        f"{value}", field=field)  # fmt: skip
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidInputError(
                f"until ({self.until:g}) is before since ({self.since:g})", field="until"
            )
        if self.request_ids is not None:
            _check_ids(self.request_ids)

    def where(self, deployment: str) -> tuple[str, list[Any]]:
        """The selection as a condition on the ``samples`` table's rows of ``deployment``,
        and its parameters."""
        conditions = ["deployment = ?"]
        params: list[Any] = [deployment]
        if self.since is not None:
            conditions.append("at >= ?")
            params.append(float(self.since))
        if self.until is not None:
            conditions.append("at < ?")
            params.append(float(self.until))
        if self.request_ids is not None:
            conditions.append("request_id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(self.request_ids)))
        return " AND ".join(conditions), params


@dataclass(frozen=True)
class DeletedSamples:
    """What a deletion removed, and the ids it was given that named no stored sample
    (never sampled, evicted, deleted before, or outside its range)."""

    count: int
    bytes: int
    not_found: tuple[str, ...] = ()


def delete(conn: sqlite3.Connection, deployment: str, selection: SampleSelection) -> DeletedSamples:
    """Delete the selected samples of ``deployment`` and take them off its usage counts, in
    the caller's transaction."""
    where, params = selection.where(deployment)
    count, size = conn.execute(
        f"SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM samples WHERE {where}", params
    ).fetchone()
    not_found: tuple[str, ...] = ()
    if selection.request_ids is not None:
        found = {row[0] for row in conn.execute(f"SELECT request_id FROM samples WHERE {where}",
                                                params)}  # fmt: skip
        not_found = tuple(rid for rid in selection.request_ids if rid not in found)
    if count:
        conn.execute(f"DELETE FROM samples WHERE {where}", params)
        conn.execute(
            "UPDATE usage SET samples = samples - ?, bytes = bytes - ? WHERE deployment = ?",
            (count, size, deployment),
        )
    return DeletedSamples(int(count), int(size), not_found)


def _check_ids(ids: tuple[str, ...]) -> None:
    if not ids:
        raise InvalidInputError("request_ids: give at least one request id", field="request_ids")
    if len(ids) > MAX_REQUEST_IDS:
        raise InvalidInputError(f"request_ids: at most {MAX_REQUEST_IDS} in one request, got "
                                f"{len(ids)}", field="request_ids")  # fmt: skip
    for index, rid in enumerate(ids):
        if not rid or len(rid) > MAX_REQUEST_ID_CHARS:
            raise InvalidInputError(
                f"request_ids[{index}]: a request id has 1 to {MAX_REQUEST_ID_CHARS} characters",
                field=f"request_ids.{index}",
            )


def deletion(
    request_ids: list[str] | tuple[str, ...] | None,
    since: float | None,
    until: float | None,
    everything: bool,
) -> SampleSelection:
    """What a deletion request names: its ids, its range, or (``everything``) every sample,
    exactly one of them; anything else is refused (422)."""
    ranged = since is not None or until is not None
    given = [name for name, on in (("request_ids", request_ids is not None),
                                   ("since/until", ranged), ("all", everything)) if on]  # fmt: skip
    if len(given) != 1:
        said = " and ".join(given) if given else "nothing"
        raise InvalidInputError(
            f"a deletion names its samples by request id, by a time range (since/until) or all "
            f"of them, one of these; got {said}",
            field="<body>" if given else "all",
        )
    ids = None if request_ids is None else tuple(dict.fromkeys(request_ids))  # (once each)
    return SampleSelection(since, until, ids)
