"""The job service's REST API (OpenAPI at ``/openapi.json``): one router per resource.

=====================  ===================================================
``/healthz``           :mod:`deepedge.api.health`
``/metrics``           :mod:`deepedge.api.metrics` (Prometheus)
``/v1/jobs``           :mod:`deepedge.api.jobs`
``/v1/deployments``    :mod:`deepedge.api.deployments`, its keys and traffic:
                       :mod:`deepedge.api.serving`, its samples: :mod:`deepedge.api.samples`
``/v1/models``         :mod:`deepedge.api.models`
``/v1/nodes``          :mod:`deepedge.api.nodes`
``/v1/host``           :mod:`deepedge.api.host`
``/v1/tenant``         :mod:`deepedge.api.tenant`
``/v1/tokens``         :mod:`deepedge.api.tokens`
``/dashboard``         :mod:`deepedge.api.dashboard`
=====================  ===================================================

Every ``/v1`` route needs ``Authorization: Bearer <token>``
(:data:`deepedge.api.dependencies.TenantDep`), ``/metrics`` the operator's; every request
must name the service in its ``Host`` header (:mod:`deepedge.api.host_check`). The
lifecycle manager runs in this process (tests, ``--no-supervise``) or, under the
supervisor, in a process of its own that this one wakes through a pipe
(:mod:`deepedge.service.wakeup`). A tenant's code never runs here: a workload is checked
in the tenant's sandbox (:mod:`deepedge.service.workload_check`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from deepedge.api import (
    dashboard,
    deployments,
    health,
    host,
    jobs,
    metrics,
    models,
    nodes,
    samples,
    serving,
    tenant,
    tokens,
)
from deepedge.api.body_limit import BodyLimitMiddleware
from deepedge.api.dependencies import AUTH_RESPONSES, ManagerLink, ServiceState
from deepedge.api.errors import install_error_handlers
from deepedge.api.host_check import HostCheckMiddleware
from deepedge.api.managers import manager_with_control
from deepedge.api.metrics import (
    LatencyMiddleware,
    SampleStoreCollector,
    ServiceCollector,
    new_registry,
)
from deepedge.dataplane.sample_store import SampleStore, sample_store_path
from deepedge.service.config import ServiceSettings
from deepedge.service.group_commit import SubmissionCommitter
from deepedge.service.manager import Manager
from deepedge.service.private_data import protect
from deepedge.service.sandbox_run import SandboxRunner
from deepedge.service.store import JobStore
from deepedge.service.wakeup import RemoteManager

ROUTERS = (
    health,
    metrics,
    jobs,
    deployments,
    serving,
    samples,
    models,
    nodes,
    host,
    tenant,
    tokens,
    dashboard,
)
PUBLIC = (health, dashboard)  # no token: the rest declare 401 and 404 in the OpenAPI


def create_app(
    settings: ServiceSettings, run_manager: bool = True, wake_fd: int | None = None
) -> FastAPI:
    """Build the app; the store is migrated at startup.

    ``wake_fd`` (the write end of a :class:`~deepedge.service.wakeup.WakePipe`): the manager
    runs in another process; otherwise it runs here, started when ``run_manager``.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        store = JobStore(settings.url)
        store.migrate()
        protect(settings.data_dir, settings.url)  # tenants' data: the service's user only
        local: Manager | None = None
        manager: ManagerLink
        if wake_fd is not None:
            manager = RemoteManager(settings.data_dir, wake_fd)
        else:
            manager = local = manager_with_control(store, settings)
        committer = SubmissionCommitter(store)
        runner = SandboxRunner.for_service(settings)
        app.state.service = ServiceState(store, manager, settings, committer, runner)
        registry.register(ServiceCollector(store.counts_by_status, manager.recovery_events))
        kept = SampleStore(sample_store_path(settings.data_dir))
        registry.register(SampleStoreCollector(kept.all_usage))
        if local is not None and run_manager:
            local.start()
        try:
            yield
        finally:
            if local is not None:
                local.stop()
            committer.stop()
            store.dispose()

    registry, latency = new_registry()
    app = FastAPI(
        title="deepedge job service",
        version="1",
        description="Submit, watch and control deepedge jobs (model updates, Ekya windows, "
        "placements, and any command as a learner).",
        lifespan=lifespan,
    )
    app.state.registry = registry
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(HostCheckMiddleware, allowed=settings.allowed_hosts)
    app.add_middleware(LatencyMiddleware, latency=latency)
    install_error_handlers(app)
    for resource in ROUTERS:
        responses = None if resource in PUBLIC else AUTH_RESPONSES
        app.include_router(resource.router, responses=responses)
    return app
