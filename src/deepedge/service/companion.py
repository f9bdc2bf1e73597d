"""The control plane as the job manager sees it: a companion that starts and stops with
it and holds a share of each tenant's quota (its deployments' serving). Built by the
service's entry point (:func:`deepedge.api.managers.manager_with_control`), which hands it
the manager's tick lock and wake-up; the service layer never imports the control plane."""

from __future__ import annotations

from typing import Protocol


class Companion(Protocol):
    """What the manager needs of the control plane that runs beside it (built by the
    service's entry point, :func:`deepedge.api.managers.manager_with_control`, which hands it
    the manager's tick lock and wake-up; the manager never imports it)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def serving_cores(self, tenant_id: str) -> tuple[float, float]:
        """The cores and GPUs the tenant's deployments serve with (its jobs get the rest
        of its quota)."""
        ...
