"""A real site on this machine for a benchmark: the service (supervisor, API, manager and,
with ``serving``, its data plane on an embedded Ray head) as a child process on loopback
(:class:`~deepedge.api.local_server.ServerProcess`, which waits for its health and tears it
down), its tenants and their tokens made straight in the store, a deployment's endpoint
waited for (:class:`DeploymentSite`: the service serving one deployment); or the same
service on a local multi-node Ray cluster with an agent per node (:class:`ClusterSite`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deepedge.api.local_server import ServerProcess, free_port, make_tenant
from deepedge.bench.harness.http import Client, InferenceKey, endpoint_ready, wait_until
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation


@dataclass(frozen=True)
class Tenant:
    """A tenant made before the service starts: its token, grants and quota (the fields of
    ``store.create_tenant``: ``max_active_jobs``, ``max_cores``, ``max_disk_mb``, ...)."""

    name: str
    token: str
    grants: tuple[str, ...] = ()
    quota: Mapping[str, float] = field(default_factory=dict)


def site_settings(data_dir: Path, serving: bool = True, **fields: Any) -> ServiceSettings:
    """The service's settings, with (``serving``) its data plane on a free loopback port."""
    if serving:
        fields = {"serving": True, "serving_port": free_port(), **fields}
    return ServiceSettings(data_dir=data_dir, **fields)


def make_tenants(settings: ServiceSettings, tenants: Iterable[Tenant]) -> None:
    """The tenants made straight in the service's store (before it starts)."""
    for tenant in tenants:
        make_tenant(settings, tenant.name, tenant.token, tenant.grants, **tenant.quota)


def start_service(
    settings: ServiceSettings, tenants: Iterable[Tenant] = (), timeout_s: float = 60.0
) -> ServerProcess:
    """The tenants made, then the service started and healthy (its log:
    ``DATA/server.log``); the caller stops it (:meth:`ServerProcess.stop`)."""
    make_tenants(settings, tenants)
    server = ServerProcess(settings)
    server.start(timeout_s=timeout_s)
    return server


def served_key(
    client: Client, deployment: str, timeout_s: float, body: Any = None, poll_s: float = 1.0,
    probe_timeout_s: float = 5.0,
) -> InferenceKey:  # fmt: skip
    """A new inference key of ``deployment`` (``body``: the key's document), once the
    deployment's endpoint answers ready (its first version trained, exported and served;
    each probe waits at most ``probe_timeout_s``)."""
    key = InferenceKey.of(client.post(f"/v1/deployments/{deployment}/keys", body))
    if not wait_until(f"{deployment}'s endpoint", lambda: endpoint_ready(key, probe_timeout_s),
                      timeout_s, poll_s=poll_s):  # fmt: skip
        raise RuntimeError(f"{deployment}'s endpoint never got ready")
    return key


@dataclass
class DeploymentSite:
    """The service serving one deployment: the service, its tenant's client, the
    deployment's id and an inference key of it."""

    server: ServerProcess
    client: Client
    deployment_id: str
    key: InferenceKey

    @property
    def data_dir(self) -> Path:
        return self.server.settings.data_dir

    def stop(self) -> None:
        self.client.close()
        self.server.stop()


def start_deployment_site(
    root: Path, tenant: Tenant, spec: Mapping[str, Any], ready_s: float = 1800.0
) -> DeploymentSite:
    """The service with its data plane (its data in ``root/data``, ``tenant`` made), the
    deployment ``spec`` created, and an inference key named after it once it serves (within
    ``ready_s``). On a failure the service is stopped; an endpoint that never got ready or a
    refused deployment raises ``RuntimeError`` naming the service's log."""
    settings = site_settings(root / "data")
    settings.data_dir.mkdir(parents=True)
    server = start_service(settings, [tenant], timeout_s=120)
    client = Client(server.url, tenant.token, timeout_s=120.0)
    name = spec["name"]
    try:
        created = client.post("/v1/deployments", dict(spec))
        key = served_key(client, name, ready_s, body={"name": name})
    except BaseException as e:
        client.close()
        server.stop()
        if isinstance(e, RuntimeError):
            raise RuntimeError(f"{e}; see {settings.data_dir}/server.log") from e
        raise
    return DeploymentSite(server, client, created["id"], key)


class ClusterSite:
    """A local Ray cluster (a head and raylets, each a ``ray start`` with its own
    ``deepedge-node:`` resource), an agent per node with its emulated device, and the
    service with ``--ray-address``, ``--trusted-tenants`` and its data plane on that cluster:
    started in that order, stopped in reverse."""

    def __init__(
        self, root: Path, devices: Mapping[str, str], tenant: Tenant, cpus_per_node: int,
        node_cpus: Mapping[str, int],
    ) -> None:  # fmt: skip
        self.root = root
        self.devices = dict(devices)  # node -> device type; "head" is the head
        self.tenant = tenant
        self.cpus_per_node = cpus_per_node
        self.node_cpus = dict(node_cpus)
        self.cluster: Any = None
        self.agents: list[Any] = []
        self.server: ServerProcess | None = None

    def start(self, timeout_s: float = 180.0) -> Client:
        """Everything up; the tenant's client of the service."""
        from deepedge.cluster.devices import DeviceType
        from deepedge.runtime.cluster.live_cluster import LiveCluster
        from deepedge.runtime.cluster.local_cluster import LocalRayCluster
        from deepedge.runtime.cluster.node_agent import start_agent
        from deepedge.runtime.cluster.session import ensure_ray

        workers = tuple(n for n in self.devices if n != "head")
        self.cluster = LocalRayCluster(worker_ids=workers, cpus_per_node=self.cpus_per_node,
                                       node_cpus=self.node_cpus)  # fmt: skip
        self.cluster.start()
        ensure_ray(address=self.cluster.address)
        devices = {n: DeviceType(d) for n, d in self.devices.items()}
        self.agents = [start_agent(n, d, (), 0.5, 3.0) for n, d in devices.items()]
        LiveCluster().wait_for(devices, timeout_s=timeout_s)
        settings = site_settings(self.root / "service", isolation=Isolation.TRUSTED,
                                 ray_address=self.cluster.address)  # fmt: skip
        self.server = start_service(settings, [self.tenant], timeout_s=timeout_s)
        return Client(self.server.url, self.tenant.token)

    def kill_node(self, node: str) -> None:
        """The node's raylet killed (SIGKILL)."""
        self.cluster.stop_node(node)

    def stop(self) -> None:
        from deepedge.runtime.cluster.session import shutdown_ray

        if self.server is not None:
            self.server.stop()
        shutdown_ray()
        if self.cluster is not None:
            self.cluster.stop()
