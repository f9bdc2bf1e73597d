"""The data plane's serving decisions, kept on the service's disk for the control loop.

When the data plane's controller moves a deployment's replicas (a node lost or draining,
see :mod:`deepedge.dataplane.replica_groups`) it keeps the move as a
:class:`ServingDecision`: when, why, which nodes were lost, the plan before and after. The
controller runs under Ray and does not write the control plane's store; it appends each
decision to the site's :class:`DecisionJournal` (JSON lines, :func:`decisions_path` under
the data folder), and the control loop, the one writer of the deployments' events, records
each decision once as its deployment's ``move`` event
(:mod:`deepedge.controlplane.serving_moves`).

Contract:

* ``seq`` numbers the decisions: one more than the journal's newest, so the numbers keep
  rising across restarts of the controller (which reopens the journal from its
  constructor's arguments). A reader that has recorded decision ``seq`` of a deployment
  never needs an older one of it again.
* The controller is the journal's only writer. A decision is one line, written with one
  ``write`` and fsync'd before the move is made; a reader skips a last line still being
  written (it is whole on a later read).
* The journal keeps the newest :data:`KEPT_DECISIONS`: past twice that, it is rewritten
  whole (:func:`~deepedge.core.durable.write_atomically`) with the newest ones.
* The journal names tenants' models and where they run: it is 0600 in a 0700 folder.
* A journal that cannot be written (a full disk) is logged; the decision is still kept in
  memory and the move still made: serving does not wait for a record.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepedge.core.durable import private_folder, write_atomically

log = logging.getLogger(__name__)

DECISIONS_FILE = Path("serving") / "decisions.jsonl"  # under the service's data folder
KEPT_DECISIONS = 1000
FILE_MODE = 0o600  # the journal and its folder are the service's user's only
FOLDER_MODE = 0o700


def decisions_path(data_dir: Path) -> Path:
    return Path(data_dir) / DECISIONS_FILE


@dataclass(frozen=True)
class ServingDecision:
    """The controller moved a deployment's replicas (or found nowhere to move them): when,
    why, from what to what. ``before`` and ``after`` are the plan
    (:func:`~deepedge.dataplane.replica_groups.plan_document`) or ``{"node": pinned node}``."""

    seq: int  # the journal's number (module docstring)
    deployment_id: str
    model: str  # the served model's name (tenant.deployment)
    at: float  # wall-clock time of the decision
    cause: str
    lost: tuple[str, ...]  # the nodes no longer placeable
    before: dict[str, Any]
    after: dict[str, Any]

    def document(self) -> dict[str, Any]:
        return {"seq": self.seq, "deployment_id": self.deployment_id, "model": self.model,
                "at": self.at, "cause": self.cause, "lost": list(self.lost),
                "before": self.before, "after": self.after}  # fmt: skip

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ServingDecision:
        return cls(int(doc["seq"]), str(doc["deployment_id"]), str(doc["model"]),
                   float(doc["at"]), str(doc["cause"]), tuple(doc["lost"]),
                   dict(doc["before"]), dict(doc["after"]))  # fmt: skip


def read_decisions(path: Path) -> list[ServingDecision]:
    """The journal's decisions, oldest first (none when it does not exist)."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    decisions = []
    for i, line in enumerate(lines):
        try:
            decisions.append(ServingDecision.from_document(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            if i < len(lines) - 1:  # (the last line may be being written)
                log.warning("serving decisions %s: line %d unreadable, skipped", path, i + 1)
    return decisions


class DecisionJournal:
    """The writer of the journal at ``path`` (module docstring); ``None``: kept in memory
    only (a controller without a data folder, in tests)."""

    def __init__(self, path: Path | None, kept: int = KEPT_DECISIONS) -> None:
        self.path = path
        self._kept = kept
        if path is not None:  # (it names tenants' models and their nodes: the service's only)
            _make_private(path)
        self._decisions = read_decisions(path) if path is not None else []

    def tail(self, n: int) -> list[ServingDecision]:
        """The newest ``n`` decisions, oldest first."""
        return self._decisions[-n:] if n > 0 else []

    def append(
        self, deployment_id: str, model: str, at: float, cause: str, lost: tuple[str, ...],
        before: dict[str, Any], after: dict[str, Any],
    ) -> ServingDecision:  # fmt: skip
        """The decision, numbered, written (module docstring)."""
        seq = self._decisions[-1].seq + 1 if self._decisions else 1
        decision = ServingDecision(seq, deployment_id, model, at, cause, lost, before, after)
        self._decisions.append(decision)
        if len(self._decisions) > 2 * self._kept:
            self._decisions = self._decisions[-self._kept :]
            self._rewrite()
        elif self.path is not None:
            self._write(decision)
        return decision

    def _write(self, decision: ServingDecision) -> None:
        assert self.path is not None
        line = json.dumps(decision.document(), sort_keys=True).encode() + b"\n"
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            with os.fdopen(os.open(self.path, flags, FILE_MODE), "ab") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            log.warning("serving decision %d not written to %s: %s", decision.seq, self.path,
                        exc)  # fmt: skip

    def _rewrite(self) -> None:
        if self.path is None:
            return
        data = b"".join(json.dumps(d.document(), sort_keys=True).encode() + b"\n"
                        for d in self._decisions)  # fmt: skip
        try:
            write_atomically(self.path, data, FILE_MODE)
        except OSError as exc:
            log.warning("serving decisions not rewritten to %s: %s", self.path, exc)


def _make_private(path: Path) -> None:
    """The journal's folder 0700 and the journal 0600 (narrowed when an older deepedge left
    them wider); a folder that cannot be made is left to the first write to report."""
    try:
        private_folder(path.parent, FOLDER_MODE)
        if path.exists():
            os.chmod(path, FILE_MODE)
    except OSError as exc:
        log.warning("serving decisions at %s: %s", path, exc)
