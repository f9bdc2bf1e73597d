"""Run the service: ``python -m deepedge.api.server --data-dir D [--db URL] [--port P]``.

``deepedge serve`` runs a small supervisor: it imports everything once, binds the listening
sockets once (TCP, and the Unix socket that sandboxed jobs with ``api_access`` reach), and
forks its children from that warm state, one per role of :data:`ROLES`: the API (serving
requests) and the lifecycle manager (admitting, deploying and watching jobs). They share
only the store and a wake-up pipe (:mod:`deepedge.service.wakeup`), so the manager's work
-- process starts, file and store writes -- never holds the API's interpreter lock. If a
child dies -- even by ``kill -9`` -- the supervisor forks a new one at once: no imports to
redo, and the sockets never close, so clients queue in the backlog instead of being
refused. A new manager reconciles the store with the running learners
(:mod:`deepedge.service.manager`).

One process tree: every child asks the kernel for a signal when the supervisor dies
(``PR_SET_PDEATHSIG``), so a supervisor killed with ``kill -9`` takes the API and the
manager with it -- no orphan keeps the port and accepts jobs that nothing would run -- and
a new ``deepedge serve`` binds the same port at once (it waits a few seconds for an old
tree still going down, then says in one line who holds the port). Learners are not part of
the tree on purpose: their collectors outlive the service and the next manager re-attaches
to them.

Tenant code is sandboxed (:mod:`deepedge.service.sandbox`): where bubblewrap cannot run,
the service refuses to start unless the operator says ``--trusted-tenants``.
``--no-supervise`` runs the API with the manager in one process. Loopback by default.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from deepedge.api.app import create_app
from deepedge.api.managers import manager_with_control
from deepedge.core.errors import ConflictError, DeepEdgeError, DependencyUnavailableError
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation, unavailable_reason
from deepedge.service.store import JobStore
from deepedge.service.wakeup import EVENTS_FILE, WakePipe, listen

log = logging.getLogger(__name__)

RESTART_FLOOR_S = 0.5  # a child dying faster than this again and again is throttled
BIND_WAIT_S = 5.0  # how long a new service waits for an old tree to free the port
PR_SET_PDEATHSIG = 1


def _listen(host: str, port: int, wait_s: float = BIND_WAIT_S) -> socket.socket:
    """The TCP socket, bound; a port still held (an old tree going down) is retried for
    ``wait_s``, then :class:`ConflictError` says so in one line."""
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            break
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise DependencyUnavailableError(f"cannot listen on {host}:{port}: {exc}") from exc
            if time.monotonic() >= deadline:
                raise ConflictError(
                    f"port {port} on {host} is in use (another deepedge serve, or another "
                    "program); stop it or choose --port"
                ) from exc
            time.sleep(0.1)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _listen_unix(path: Path) -> socket.socket:
    """The API's Unix socket (what a sandboxed job with ``api_access`` reaches): world
    writable (sandbox users connect to it), in a folder of the service's."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    path.unlink(missing_ok=True)  # left by a killed service: the TCP port was free
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o666)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _serve_on(app: FastAPI, sockets: list[socket.socket]) -> None:
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=sockets)


def _warm(settings: ServiceSettings, wake_fd: int | None = None) -> FastAPI:
    """Do once, before forking, everything a serving process would otherwise redo.

    Builds the app (routes, schemas) and touches the store so SQLAlchemy loads its dialect;
    the engine is disposed again, so no database connection is shared across the fork.
    """
    app = create_app(settings, wake_fd=wake_fd)
    app.openapi()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.url)
    store.migrate()
    store.dispose()
    # Everything loaded so far lives as long as the process: move it out of the cyclic
    # collector's reach, so its full collections (pauses on the request path) stay short.
    gc.collect()
    gc.freeze()
    return app


def _run_manager(settings: ServiceSettings, read_fd: int, supervisor_pid: int) -> None:
    """The manager process: the lifecycle loop, woken through the pipe, until SIGTERM or
    until its supervisor is gone (a manager outliving it could meet the next service's
    manager: two loops starting learners for the same jobs)."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    store = JobStore(settings.url)
    manager = manager_with_control(store, settings, events_path=settings.data_dir / EVENTS_FILE)
    listen(read_fd, manager.wake, manager.submitted)
    manager.start()
    orphaned = False
    while not done.wait(0.5):
        if os.getppid() != supervisor_pid:
            log.warning("supervisor %d is gone; the manager stops and leaves the running "
                        "learners to the next start", supervisor_pid)  # fmt: skip
            orphaned = True
            break
    # A stop on purpose (the supervisor's SIGTERM: Ctrl-C or `kill` of `deepedge serve`)
    # stops what the service started; a crash hands it over (the next manager re-attaches).
    stopped = manager.stop(stop_jobs=not orphaned)
    if stopped:
        log.warning("service stopped: the learners of %d running job(s) were stopped (%s); "
                    "they restart from their checkpoints at the next start", len(stopped),
                    ", ".join(stopped))  # fmt: skip
    store.dispose()


@dataclass(frozen=True)
class Role:
    """One long-lived child of the supervisor: how it runs, and how it ends with it."""

    name: str
    run: Callable[[Warm], None]  # the body, in the forked child
    death_signal: int = signal.SIGKILL  # sent by the kernel when the supervisor dies
    new_session: bool = False  # its own session (CPU shares apart from the API's)


@dataclass(frozen=True)
class Warm:
    """What the supervisor prepared before forking: shared by every child."""

    settings: ServiceSettings
    app: FastAPI
    sockets: list[socket.socket]
    wake: WakePipe
    supervisor_pid: int


def _api(warm: Warm) -> None:
    _serve_on(warm.app, warm.sockets)


def _manager(warm: Warm) -> None:
    for sock in warm.sockets:
        sock.close()
    _run_manager(warm.settings, warm.wake.read_fd, warm.supervisor_pid)


def _data_plane(warm: Warm) -> None:
    """The data plane's host (:mod:`deepedge.controlplane.serving_host`): until SIGTERM."""
    from deepedge.controlplane import serving_host

    for sock in warm.sockets:
        sock.close()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        serving_host.run(warm.settings, done, warm.supervisor_pid)
    except Exception:
        log.exception("the data plane's host failed")
        raise


def _node_watch(warm: Warm) -> None:
    """The node watcher (:mod:`deepedge.runtime.cluster.node_snapshot`): the only process of the
    service connected to its Ray cluster for the control plane; until SIGTERM."""
    from deepedge.runtime.cluster import node_snapshot

    for sock in warm.sockets:
        sock.close()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    assert warm.settings.ray_address is not None
    node_snapshot.watch(warm.settings.ray_address, warm.settings.data_dir, done)


# Order matters only at start-up. A role added here gets the same restarts, throttling and
# death with the supervisor.
ROLES: tuple[Role, ...] = (
    Role("api", _api),
    # Its own session: where the kernel groups CPU shares by session (autogroup),
    # deploying and watching jobs then cannot take the API's share.
    Role("manager", _manager, new_session=True),
)
# With the data plane on: its host, told to stop (SIGTERM) when the supervisor dies, so
# that it stops the embedded Ray head it started.
DATA_PLANE = Role("dataplane", _data_plane, death_signal=signal.SIGTERM, new_session=True)
# On a Ray cluster (--ray-address): the node watcher, which writes the registry's nodes
# down for the API and the manager (deepedge.controlplane.live_nodes).
NODE_WATCH = Role("nodes", _node_watch, death_signal=signal.SIGTERM, new_session=True)
ROLES_FILE = "service-processes.json"  # in the data folder: which process is which


def _record_roles(settings: ServiceSettings, children: dict[int, Role]) -> None:
    """Write ``{role: pid}`` of the supervisor and its children (for an operator's ``ps``
    and for the benchmarks that kill one process of the service on purpose)."""
    path = settings.data_dir / ROLES_FILE
    document = {"supervisor": os.getpid(), **{role.name: pid for pid, role in children.items()}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


def _die_with(parent: int, signum: int) -> None:
    """Ask the kernel for ``signum`` when ``parent`` dies; if it is already gone (it died
    between the fork and this call), go now."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    if os.getppid() != parent:
        os._exit(0)


def refuse_unsandboxed(settings: ServiceSettings) -> None:
    """Raise DependencyUnavailableError (one line) when tenants must be sandboxed and
    cannot be here."""
    if settings.isolation is not Isolation.SANDBOX:
        log.warning("tenants are trusted: their code runs as the service (--trusted-tenants)")
        return
    reason = unavailable_reason(settings.data_dir)
    if reason is not None:
        raise DependencyUnavailableError(
            f"cannot sandbox tenant code: {reason}; with tenants who may see each other's "
            "data and the service's, start with --trusted-tenants"
        )


def announce_memory_cgroups() -> None:
    """At start: remove the memory cgroups of runs whose creator died (the collectors of a
    crashed service, a killed run), and say once whether tenant runs get one here."""
    from deepedge.core import memory_cgroup

    stale = memory_cgroup.sweep_stale()
    if stale:
        log.info("removed %d memory cgroup(s) of runs that ended in a crash", len(stale))
    reason = memory_cgroup.unavailable_reason()
    if reason is not None:
        log.warning(
            "tenant runs get no memory cgroup here (%s): their memory is bounded by rlimits "
            "only, per process, and their /tmp and /dev/shm by their size alone", reason,
        )  # fmt: skip


def _claim_uids(settings: ServiceSettings) -> None:
    """This service's range of sandbox uids, claimed on the host before anything binds:
    a range another live service holds is refused in one line (UidRangeClaimedError)."""
    store = JobStore(settings.url)
    try:
        store.migrate()
        log.info("sandbox uids %s", settings.claim_uids(store))
    finally:
        store.dispose()


def serve(
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 8750,
    supervise: bool = True,
    roles: tuple[Role, ...] = ROLES,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; ``on_listening(port)`` is called once the sockets are
    bound (connections queue from then on), before any process is forked."""
    refuse_unsandboxed(settings)
    announce_memory_cgroups()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _claim_uids(settings)
    if roles is ROLES:
        roles = (*ROLES, *([DATA_PLANE] if settings.serving else []),
                 *([NODE_WATCH] if settings.ray_address else []))  # fmt: skip
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    sockets = [_listen(host, port), _listen_unix(settings.api_socket)]
    if on_listening is not None:
        on_listening(int(sockets[0].getsockname()[1]))
        sys.stdout.flush()  # nothing buffered may be written twice by the forked children
    if not supervise:
        _serve_on(_warm(settings), sockets)
        return
    pipe = WakePipe.create()
    warm = Warm(settings, _warm(settings, wake_fd=pipe.write_fd), sockets, pipe, os.getpid())
    stopping = False
    children: dict[int, Role] = {}

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _fork(role: Role) -> None:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                _die_with(warm.supervisor_pid, role.death_signal)
                if role.new_session:
                    os.setsid()
                role.run(warm)
            finally:
                os._exit(0)
        children[pid] = role
        _record_roles(settings, children)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    started = {role.name: time.monotonic() for role in roles}
    quick_deaths = dict.fromkeys(started, 0)
    for role in roles:
        _fork(role)
    while children:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            break
        if pid not in children:
            continue
        role = children.pop(pid)
        if stopping:
            continue
        cause = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                 else f"exited with {os.WEXITSTATUS(status)}")  # fmt: skip
        log.warning("%s process %d %s; starting a new one", role.name, pid, cause)
        quick = time.monotonic() - started[role.name] < RESTART_FLOOR_S
        quick_deaths[role.name] = quick_deaths[role.name] + 1 if quick else 0
        if quick_deaths[role.name] > 5:
            time.sleep(min(2.0 ** quick_deaths[role.name] / 32, 10.0))
        started[role.name] = time.monotonic()
        _fork(role)
    for sock in sockets:
        sock.close()
    settings.api_socket.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge-server")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in data-dir)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8750)
    parser.add_argument("--no-supervise", action="store_true", help="no restarting supervisor")
    parser.add_argument("--ray-address", default=None, help="Ray cluster the learners connect to")
    parser.add_argument(
        "--learners-on-ray", action="store_true", help="learners run as Ray tasks there"
    )
    parser.add_argument(
        "--trusted-tenants", action="store_true",
        help="run tenant code as the service, without a sandbox (tenants trust each other)",
    )  # fmt: skip
    parser.add_argument(
        "--public-metrics", action="store_true", help="/metrics without the operator's token"
    )
    parser.add_argument(
        "--allowed-host", action="append", default=[],
        help="a Host name the API answers besides the loopback ones (repeatable)",
    )  # fmt: skip
    parser.add_argument("--data-plane", action="store_true", help="serve deployments (Ray Serve)")
    parser.add_argument("--data-plane-host", default="127.0.0.1")
    parser.add_argument("--data-plane-port", type=int, default=8000)
    parser.add_argument(
        "--control-workers", type=int, default=ServiceSettings.control_workers,
        help="deployments the control loop advances at once (0: in turn)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    settings = ServiceSettings(
        data_dir=args.data_dir,
        database_url=args.db,
        ray_address=args.ray_address,
        learners_on_ray=args.learners_on_ray and bool(args.ray_address),
        isolation=Isolation.TRUSTED if args.trusted_tenants else Isolation.SANDBOX,
        public_metrics=args.public_metrics,
        allowed_hosts=(args.host, *args.allowed_host),
        serving=args.data_plane,
        serving_host=args.data_plane_host,
        serving_port=args.data_plane_port,
        control_workers=args.control_workers,
    )
    try:
        serve(settings, args.host, args.port, supervise=not args.no_supervise)
    except DeepEdgeError as exc:
        sys.stderr.write(f"error: {exc.message}\n")
        sys.exit(exc.exit_code)
    sys.exit(0)


if __name__ == "__main__":
    main()
