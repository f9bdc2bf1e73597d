"""What the data plane's host says of the data plane, and what a reader may conclude.

The host (:mod:`deepedge.controlplane.serving_host`) writes one small document to the data
folder whenever its state changes and every few seconds while it lives (a heartbeat):
``{"state", "since", "attempt", "reason", "pid", "updated_at", "url"}``. The API reads it
for ``GET /v1/deployments/NAME/traffic`` and ``GET /v1/host``, so an operator sees a data
plane that is starting, retrying (with the reason of the last failure) or gone, instead of
``data_plane: true`` on a service that has not served a request yet.

:func:`judge` is pure: the recorded document, whether its writer still runs, and the time
in, the state an operator is shown out. A document whose writer is gone, or that has not
been refreshed for :data:`STALE_S`, is not believed.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import psutil

from deepedge.core.errors import IllegalTransitionError
from deepedge.service.durable_files import read_json, write_private

STATUS_FILE = "data-plane.json"
HEARTBEAT_S = 2.0  # the host refreshes the document at least this often
STALE_S = 30.0  # older than this: the host is not looking after the data plane


class DataPlaneState(enum.StrEnum):
    OFF = "off"  # the service runs no data plane (started without --data-plane)
    STARTING = "starting"  # the host is starting Ray and Serve, or the first start runs
    SERVING = "serving"  # the data plane answered its readiness probe
    RETRYING = "retrying"  # a start or a probe failed; the host tries again at ``retry_at``
    FAILED = "failed"  # the host is not running (or silent): nobody looks after serving


# What the host may move to (FAILED is a reader's conclusion, never written; OFF is a
# service without a data plane). Staying in a state is always allowed (a heartbeat).
TRANSITIONS: dict[DataPlaneState, frozenset[DataPlaneState]] = {
    DataPlaneState.OFF: frozenset(),
    DataPlaneState.STARTING: frozenset({DataPlaneState.SERVING, DataPlaneState.RETRYING}),
    DataPlaneState.SERVING: frozenset({DataPlaneState.STARTING, DataPlaneState.RETRYING}),
    DataPlaneState.RETRYING: frozenset({DataPlaneState.STARTING, DataPlaneState.SERVING}),
    DataPlaneState.FAILED: frozenset({DataPlaneState.STARTING}),
}


@dataclass(frozen=True)
class DataPlaneHealth:
    state: DataPlaneState
    since: float  # when it entered this state
    updated_at: float  # the writer's last heartbeat
    attempt: int = 0  # starts tried since the host began (1 = the first)
    reason: str = ""  # why it is not serving (empty when it is)
    retry_at: float | None = None
    pid: int | None = None
    url: str = ""

    @property
    def serving(self) -> bool:
        return self.state is DataPlaneState.SERVING

    def document(self) -> dict[str, object]:
        return {**asdict(self), "state": self.state.value}

    def moved_to(self, state: DataPlaneState, now: float, **changes: object) -> DataPlaneHealth:
        """This health in ``state`` from ``now`` (``since`` kept when the state is the same)."""
        if state is not self.state and state not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(
                f"a {self.state.value} data plane cannot become {state.value}",
                current=self.state.value,
                target=state.value,
            )
        since = self.since if state is self.state else now
        fields: dict[str, object] = {"reason": "", "retry_at": None, **changes}
        return replace(self, state=state, since=since, updated_at=now, **fields)  # type: ignore[arg-type]


def status_path(data_dir: Path) -> Path:
    return Path(data_dir) / STATUS_FILE


def write_health(data_dir: Path, health: DataPlaneHealth) -> None:
    """Replace the document whole (a reader never sees half of one), owner-only."""
    write_private(status_path(data_dir), health.document())


def read_health(data_dir: Path) -> DataPlaneHealth | None:
    """The recorded document, or None when there is none or it cannot be read."""
    raw = read_json(status_path(data_dir))
    if raw is None:
        return None
    try:
        return DataPlaneHealth(
            state=DataPlaneState(raw["state"]),
            since=float(raw["since"]),
            updated_at=float(raw["updated_at"]),
            attempt=int(raw.get("attempt", 0)),
            reason=str(raw.get("reason", "")),
            retry_at=None if raw.get("retry_at") is None else float(raw["retry_at"]),
            pid=None if raw.get("pid") is None else int(raw["pid"]),
            url=str(raw.get("url", "")),
        )
    except (ValueError, KeyError, TypeError):
        return None


def judge(
    recorded: DataPlaneHealth | None, *, enabled: bool, writer_alive: bool, now: float
) -> DataPlaneHealth:
    """What an operator is shown (pure; module docstring)."""
    if not enabled:
        return DataPlaneHealth(DataPlaneState.OFF, since=now, updated_at=now)
    if recorded is None:
        return DataPlaneHealth(DataPlaneState.STARTING, since=now, updated_at=now,
                               reason="the data plane's host has not reported yet")  # fmt: skip
    if not writer_alive:
        return replace(recorded, state=DataPlaneState.FAILED, since=recorded.updated_at,
                       reason="the data plane's host is not running"
                       + (f" (last: {recorded.state.value}"
                          + (f", {recorded.reason})" if recorded.reason else ")")),
                       retry_at=None)  # fmt: skip
    if now - recorded.updated_at > STALE_S:
        return replace(recorded, state=DataPlaneState.FAILED, since=recorded.updated_at,
                       reason=f"the data plane's host has not reported for "
                       f"{now - recorded.updated_at:.0f} s", retry_at=None)  # fmt: skip
    return recorded


def current(data_dir: Path, *, enabled: bool, now: float) -> DataPlaneHealth:
    """:func:`judge` of the document in ``data_dir`` (the API's reader)."""
    recorded = read_health(data_dir)
    alive = recorded is not None and recorded.pid is not None and psutil.pid_exists(recorded.pid)
    return judge(recorded, enabled=enabled, writer_alive=alive, now=now)
