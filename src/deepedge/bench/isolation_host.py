"""Attacks of ``python -m deepedge.bench.isolation`` on what the host shares: the data
plane's listening ports, sandbox uids across two services on one host, an inference key
made by a job, the hypervisor's vsock.

* **Ports** (need the data plane, so not quick): every server of the data plane's Ray head
  (GCS, raylet, agents, workers, metrics exporters) and HAProxy's stats page and Prometheus
  exporter (which list every tenant's ``<tenant>.<deployment>`` with its counters) must
  listen on loopback only. An attack is a breach when one of them is bound to every
  interface or to another address, or answers a connection made to another address of the
  host (what anyone on the network would reach). At the data plane's own address, while
  alice's model is served and answers her own key (:mod:`deepedge.bench.isolation_served`),
  Ray Serve's routes (``/-/routes`` lists every tenant's served models; ``/-/healthz``, also
  under a model's prefix, where a replica's answer tells that the model is served) must
  get the protocol's 404 naming neither her model nor her deployment, and every route of
  her model (metadata, ``ready``, ``infer``, ...) must answer as the same route of a model
  nothing serves, with no key as with the attacker's key; so must every route of her
  placed deployments, reached through their camera routers, before their replica groups
  exist and after they serve, with a revoked and a fresh key of the attacker's too
  (:mod:`deepedge.bench.isolation_placed`).
* **uids**: a second service on the host must give its tenants uids the first's do not
  have, and a second service whose tenants hold the first's uids must not start.
* **A job's inference key**: a job with ``api_access`` creates a key for its tenant's
  deployment; once the job has ended the key must be dead (not among the live keys the data
  plane checks requests against).
* **vsock**: ``socket(AF_VSOCK)`` in a sandbox reaches the hypervisor's and the host's vsock
  services past the network namespace; creating one is the breach (nothing is connected).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from deepedge.api.local_server import ServerProcess, make_tenant
from deepedge.bench.isolation_attacks import Arena, JobAttack, Outcome, ProbeAttack, _api_job, _py
from deepedge.bench.isolation_placed import placed_routes
from deepedge.bench.isolation_served import (
    MODEL_PATHS,
    UNSERVED_MODEL,
    Served,
    existence_leaks,
    names_leaked,
    retire_alice,
    serve_alice,
)
from deepedge.service.config import ServiceSettings
from deepedge.service.embedded_ray import HeadRecord, read_head
from deepedge.service.store import JobStore

BOB_DEPLOYMENT = "bob-cams-keys"  # bob's deployment (stopped: no training), for his keys
DATA_PLANE_WAIT_S = 400.0
PORTS = "data plane ports"  # the entry of the attacks that need the data plane


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket: its address, port and the process holding it."""

    address: str
    port: int
    process: str

    @property
    def loopback(self) -> bool:
        host = self.address.removeprefix("::ffff:")
        return ipaddress.ip_address(host).is_loopback

    def __str__(self) -> str:
        return f"{self.process} on {self.address}:{self.port}"


def head_processes(record: HeadRecord) -> set[int]:
    """The pids of an embedded head: its process tree, and every process naming its folders
    (Ray's workers re-parent; HAProxy names its configuration)."""
    pids: set[int] = set()
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(record.pid)
        pids |= {root.pid, *(p.pid for p in root.children(recursive=True))}
    markers = [m for m in (record.root, record.state_dir) if m]
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(m in part for part in proc.info["cmdline"] or [] for m in markers):
                pids |= {proc.pid, *(p.pid for p in proc.children(recursive=True))}
    return pids


def listeners(pids: Iterable[int]) -> list[Listener]:
    """The listening TCP sockets of ``pids``."""
    wanted, found = set(pids), []
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in wanted and conn.laddr:
            with contextlib.suppress(psutil.Error):
                name = psutil.Process(conn.pid).name()
                found.append(Listener(conn.laddr.ip, conn.laddr.port, name))
    return sorted(found, key=lambda li: li.port)


def host_addresses() -> list[str]:
    """This host's addresses other than loopback and link-local ones: where anyone on its
    networks would connect."""
    out = []
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(addr.address.split("%")[0])
            if not (ip.is_loopback or ip.is_link_local):
                out.append(str(ip))
    return sorted(set(out))


def answers(address: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        socket.create_connection((address, port), timeout_s).close()
    except OSError:
        return False
    return True


def exposed(found: list[Listener], addresses: list[str]) -> list[str]:
    """What of ``found`` is not on loopback only: bound elsewhere, or answering at one of
    ``addresses``."""
    out = [f"{li} (not loopback)" for li in found if not li.loopback]
    out += [f"{li} answers at {a}" for li in found if li.loopback for a in addresses
            if answers(a, li.port)]  # fmt: skip
    return out


def haproxy_config(state_dir: Path) -> Path | None:
    """HAProxy's configuration under the data plane's folder (Serve writes it in a folder
    named after the Ray node)."""
    return next(iter(sorted(state_dir.rglob("haproxy.cfg"))), None)


def haproxy_ports(state_dir: Path) -> dict[str, int]:
    """The stats page's and the exporter's ports, from HAProxy's configuration."""
    ports, section = {}, ""
    config = haproxy_config(state_dir)
    if config is None:
        raise OSError(f"no haproxy.cfg under {state_dir}")
    for line in config.read_text().splitlines():
        if line and not line[0].isspace():
            section = " ".join(line.split()[:2])
        elif section in {"listen stats", "frontend prometheus", "frontend http_frontend"} \
                and "bind" in line:  # fmt: skip
            ports[section] = int(line.split()[1].rsplit(":", 1)[1])
    return ports


# -- the attacks -----------------------------------------------------------------------


def _running_head(arena: Arena) -> HeadRecord:
    """The data plane's head, once it answers (the service starts it in the background)."""
    settings = arena.server.settings
    deadline = time.monotonic() + DATA_PLANE_WAIT_S
    url = f"http://{settings.serving_host}:{settings.serving_port}/v2/health/live"
    while time.monotonic() < deadline:
        record = read_head(arena.data_dir)
        if record is not None and record.state_dir is not None:
            with contextlib.suppress(httpx.HTTPError, OSError):
                up = httpx.get(url, timeout=2.0, trust_env=False).status_code == 200
                if up and haproxy_config(Path(record.state_dir)) is not None:
                    return record
        time.sleep(1.0)
    raise OSError(f"the data plane did not answer within {DATA_PLANE_WAIT_S:.0f} s")


def _port_attack(page: str, path: str) -> Callable[[Arena], Outcome]:
    """Read HAProxy's ``page`` (its section) from every address of the host but loopback."""

    def run(arena: Arena) -> Outcome:
        record = _running_head(arena)
        assert record.state_dir is not None
        port = haproxy_ports(Path(record.state_dir))[page]
        found = [li for li in listeners(head_processes(record)) if li.port == port]
        addresses = host_addresses()
        leaks = exposed(found, addresses)
        for address in addresses:
            host = f"[{address}]" if ":" in address else address
            with contextlib.suppress(httpx.HTTPError):
                body = httpx.get(f"http://{host}:{port}{path}", timeout=2.0, trust_env=False)
                leaks.append(f"{path} answered {body.status_code} at {address}")
        if leaks:
            return Outcome(True, "; ".join(leaks))
        return Outcome(False, f"port {port}: {', '.join(map(str, found)) or 'not listening'}; "
                       f"refused at {', '.join(addresses) or '(no other address)'}")  # fmt: skip

    return run


def serve_routes(model: str) -> tuple[str, ...]:
    """Serve's own routes, at the top and under ``model``'s prefix (spelt as a proxy or a
    client might normalise them)."""
    return ("/-/routes", "/-/healthz", "/-/ROUTES", "/%2D/routes", "/%2d/healthz",
            f"/v2/models/{model}/-/healthz", f"/v2/models/{model}/-/routes",
            f"/v2/models/{model}%2F-%2Froutes")  # fmt: skip


SERVE_APPS = ("deepedge-front", "model-", "groups-")  # the names Serve's listing answers with


def _serve_routes(arena: Arena) -> Outcome:
    """Ray Serve's own routes at the data plane's address while alice's model is served
    and answering her, without a key and with bob's inference key: a breach is a 200 or an
    answer naming a Serve application, alice's model or her deployment (Serve's listing
    maps every served model's route to ``model-<tenant>.<deployment>``; a replica's health
    route under a model's prefix answers 200 when the model is served). And every route
    of alice's model must answer bob as the same route of a model nothing serves
    (:func:`~deepedge.bench.isolation_served.existence_leaks`)."""
    _running_head(arena)
    try:
        served = serve_alice(arena)
    except (RuntimeError, httpx.HTTPError) as exc:
        return Outcome(False, f"probe failed: alice's model was not served: {exc}"[:200])
    try:
        return _probe_routes(arena, served)
    finally:
        retire_alice(arena)


def _probe_routes(arena: Arena, served: Served) -> Outcome:
    if not served.answering:
        return Outcome(False, f"probe failed: alice's {served.model} did not answer her "
                       f"(ready {served.ready_status}, infer {served.infer_status})")  # fmt: skip
    settings = arena.server.settings
    base = f"http://{settings.serving_host}:{settings.serving_port}"
    with arena.client() as api:  # bob's own inference key, for his stopped deployment
        made = api.post(f"/v1/deployments/{BOB_DEPLOYMENT}/keys", json={"name": "routes"})
    key = made.json().get("key", "") if made.status_code < 300 else ""
    whose = "bob's inference key" if key else "bob's API token"
    callers = {"no key": {}, whose: {"Authorization": f"Bearer {key or arena.attacker_token}"}}
    leaks, statuses = [], set[int]()
    paths = serve_routes(served.model)
    with httpx.Client(base_url=base, timeout=30.0, trust_env=False) as client:
        for path in paths:
            for who, headers in callers.items():
                answer = client.get(path, headers=headers)
                statuses.add(answer.status_code)
                named = names_leaked(answer, (*SERVE_APPS, *served.names()))
                if answer.status_code == 200 or named:
                    leaks.append(f"{path} ({who}): {answer.status_code} {answer.text[:60]!r}")
        existence, compared = existence_leaks(client, served, callers)
        # the control: with her own key the same comparison must tell her model apart
        told, _ = existence_leaks(client, served, {"alice's key": dict(served.key.auth())})
        after = client.get(served.key.route("ready"), headers=served.key.auth()).status_code
    leaks += existence
    if leaks:
        return Outcome(True, f"{served.evidence()}; " + "; ".join(leaks[:3]))
    if after != 200 or len(told) != len(MODEL_PATHS):
        return Outcome(False, f"probe failed: alice's {served.model} did not answer her "
                       f"during the probe (ready {after}; {len(told)} of "
                       f"{len(MODEL_PATHS)} routes told apart with her key)")  # fmt: skip
    return Outcome(False, f"{served.evidence()}, after it ready {after}; Serve's "
                   f"{len(paths)} paths with no key and {whose}: "
                   f"{', '.join(map(str, sorted(statuses)))}, none naming her model; "
                   f"{compared} requests to her model's routes answered as to "
                   f"{UNSERVED_MODEL} (with her key all {len(told)} told apart)")  # fmt: skip


def _placed_routes(arena: Arena) -> Outcome:
    """Alice's placed deployments through their camera routers, before their replica
    groups exist and after they serve (:mod:`deepedge.bench.isolation_placed`)."""
    _running_head(arena)
    return placed_routes(arena, BOB_DEPLOYMENT)


def _ray_ports(arena: Arena) -> Outcome:
    """Every other server of the data plane's head: Ray's (GCS, raylet, agents, workers,
    metrics exporters) and Serve's, but the ingress the operator placed."""
    record = _running_head(arena)
    ingress = arena.server.settings.serving_port
    found = [li for li in listeners(head_processes(record)) if li.port != ingress]
    addresses = host_addresses()
    leaks = exposed(found, addresses)
    if leaks:
        return Outcome(True, f"{len(leaks)} of {len(found)}: " + "; ".join(leaks[:4]))
    return Outcome(False, f"{len(found)} listeners, all on loopback; none answers at "
                   f"{', '.join(addresses) or '(no other address)'}")  # fmt: skip


def _second_service_uids(arena: Arena) -> Outcome:
    """A second service on this host: a new one gives its tenant a uid of its own; one whose
    store numbers its tenants as the first does (a copied data folder, two stores from
    before ranges) does not start."""
    first = JobStore(arena.server.settings.url)
    try:
        theirs, mine = first.tenancy.uid_range(), {t.uid for t in first.tenancy.all()}
    finally:
        first.dispose()
    assert theirs is not None
    breaches: list[str] = []
    isolation = arena.server.settings.isolation
    fresh = ServiceSettings(data_dir=arena.root / "second-service", isolation=isolation)
    make_tenant(fresh, "carol", "tok-carol")
    uid = _started_tenant_uid(ServerProcess(fresh), "carol")
    if uid is None or uid in mine or uid in theirs:
        breaches.append(f"carol of a second service got uid {uid} (the first's: {theirs})")
    copied = ServiceSettings(data_dir=arena.root / "copied-service", isolation=isolation)
    copied.data_dir.mkdir(parents=True)
    store = JobStore(copied.url)
    store.migrate()
    store.tenancy.record_uid_range(theirs)  # numbered as the first: its tenants' uids
    dave = store.create_tenant("dave", "tok-dave").uid
    store.dispose()
    if _started_tenant_uid(ServerProcess(copied), "dave") is not None:
        breaches.append(f"a service whose tenant dave has the first's uid {dave} started")
    if breaches:
        return Outcome(True, "; ".join(breaches))
    return Outcome(False, f"carol: uid {uid}, outside {theirs}; the service with dave "
                   f"(uid {dave}) refused to start")  # fmt: skip


def _started_tenant_uid(server: ServerProcess, tenant: str) -> int | None:
    """Start ``server``; the uid of its ``tenant`` if it started (None: it refused)."""
    try:
        server.start()
    except (RuntimeError, TimeoutError):
        return None
    try:
        store = JobStore(server.settings.url)
        try:
            return store.tenancy.named(tenant).uid
        finally:
            store.dispose()
    finally:
        server.stop()


def _key_outlives(arena: Arena, _job: str, log: str) -> Outcome:
    from deepedge.controlplane.inference_keys import InferenceKeyStore
    from deepedge.dataplane.keys import key_digest

    keys = [line.split()[1] for line in log.splitlines() if line.startswith("KEY dpk_")]
    if not keys:
        return Outcome(False, "no key was made")
    store = JobStore(arena.server.settings.url)
    try:
        live = InferenceKeyStore(store).live_grants()
    finally:
        store.dispose()
    alive = key_digest(keys[0]) in live
    return Outcome(alive, "its key is live after the job ended" if alive
                   else "its key was revoked with the job")  # fmt: skip


MAKE_KEY = f"""
status, body = call("POST", "/v1/deployments/{BOB_DEPLOYMENT}/keys", {{"name": "lasting"}})
print("STATUS", status)
print("KEY", json.loads(body).get("key"))
"""
VSOCK = """
import socket
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print("VSOCK-OPEN", s.fileno())
except OSError as e:
    print(e)
"""


def host_job_attacks() -> list[JobAttack]:
    return [
        JobAttack("keep an inference key made with the job's token", "service ports", True,
                  _api_job(MAKE_KEY), _key_outlives),
        JobAttack("open an AF_VSOCK socket (the hypervisor's, the host's)", "command job",
                  True, _py(VSOCK), lambda a, j, log: _found_vsock(log)),
    ]  # fmt: skip


def _found_vsock(log: str) -> Outcome:
    found = "VSOCK-OPEN" in log
    return Outcome(found, "an AF_VSOCK socket was created" if found else "")


def host_probe_attacks() -> list[ProbeAttack]:
    return [
        ProbeAttack("share sandbox uids with a second service on the host", "host uids", True,
                    _second_service_uids),
        ProbeAttack("read HAProxy's stats page from another address of the host",
                    PORTS, False, _port_attack("listen stats", "/stats;csv")),
        ProbeAttack("scrape HAProxy's Prometheus exporter from another address",
                    PORTS, False, _port_attack("frontend prometheus", "/metrics")),
        ProbeAttack("reach Ray's GCS, raylet, agents or metrics of the data plane",
                    PORTS, False, _ray_ports),
        ProbeAttack("learn alice's served model at Serve's /-/routes or her model's routes",
                    PORTS, False, _serve_routes),
        ProbeAttack("learn alice's placed model from her camera router, as at /-/routes",
                    PORTS, False, _placed_routes),
    ]  # fmt: skip


def needs_data_plane(quick: bool, only: tuple[str, ...]) -> bool:
    """Whether a run (``--quick``, ``--only`` words) has a port attack, and so the arena's
    service must start its data plane (tens of seconds)."""
    ports = [p for p in host_probe_attacks() if p.entry == PORTS]
    return not quick and any(not only or any(w in f"{p.name} {p.entry}" for w in only)
                             for p in ports)  # fmt: skip


def furnish_host(settings_url: str) -> None:
    """Before the service starts: bob's deployment (stopped, so the control loop trains
    nothing), which his job's key will be for."""
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.rollout_status import DeploymentStatus

    store = JobStore(settings_url)
    try:
        bob = next(t for t in store.tenancy.all() if t.name == "bob")
        registry = DeploymentStore(store)
        deployment, _ = registry.create(bob.id, DeploymentSpec(name=BOB_DEPLOYMENT))
        registry.commit(deployment, Step(deployment={"status": DeploymentStatus.STOPPED}))
    finally:
        store.dispose()
