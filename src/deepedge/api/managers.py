"""The job manager and the control plane, built side by side by the service's entry points
(the manager process of ``deepedge serve``, or an app that runs its own manager): the
manager is the job service's (``service/``), the control plane sits above it
(``controlplane/``) and shares its tick lock and wake-up; neither imports the other."""

from __future__ import annotations

from pathlib import Path

from deepedge.controlplane.loop import ControlPlane
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Manager
from deepedge.service.store import JobStore


def manager_with_control(
    store: JobStore, settings: ServiceSettings, events_path: Path | None = None
) -> Manager:
    """The job manager with the control plane beside it, sharing its tick lock (a job is
    submitted and staged under it) and its wake-up: built side by side here, so neither
    imports the other."""
    manager = Manager(store, settings, events_path=events_path)
    manager.control = ControlPlane(store, settings, manager.tick_lock, manager.wake,
                                   step_workers=settings.control_workers)  # fmt: skip
    return manager
