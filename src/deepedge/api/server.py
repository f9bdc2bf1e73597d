"""Run the service: ``python -m deepedge.api.server --data-dir D [--db URL] [--port P]``.

``deepedge serve`` runs a small supervisor: it imports everything once, binds the listening
socket once, and forks two processes from that warm state: the API (serving requests) and
the lifecycle manager (admitting, deploying and watching jobs). They share only the store
and a wake-up pipe (:mod:`deepedge.service.wakeup`), so the manager's work -- process
starts, file and store writes -- never holds the API's interpreter lock. If either dies --
even by ``kill -9`` -- the supervisor forks a new one at once: no imports to redo, and the
socket never closes, so clients queue in its backlog instead of being refused. A new
manager reconciles the store with the running learners (:mod:`deepedge.service.manager`).
``--no-supervise`` runs the API with the manager in one process. Loopback by default.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
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
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Manager
from deepedge.service.store import JobStore
from deepedge.service.wakeup import EVENTS_FILE, WakePipe, listen

log = logging.getLogger(__name__)

RESTART_FLOOR_S = 0.5  # a child dying faster than this again and again is throttled


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _serve_on(app: FastAPI, sock: socket.socket) -> None:
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


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
    manager = Manager(store, settings, events_path=settings.data_dir / EVENTS_FILE)
    listen(read_fd, manager.wake, manager.submitted)
    manager.start()
    while not done.wait(0.5):
        if os.getppid() != supervisor_pid:
            log.warning("supervisor %d is gone; the manager stops", supervisor_pid)
            break
    manager.stop()
    store.dispose()


ROLES_FILE = "service-processes.json"  # in the data folder: which process is which


def _record_roles(settings: ServiceSettings, children: dict[int, Role]) -> None:
    """Write ``{role: pid}`` of the supervisor and its children (for an operator's ``ps``
    and for the benchmarks that kill one process of the service on purpose)."""
    path = settings.data_dir / ROLES_FILE
    document = {"supervisor": os.getpid(), **{role.value: pid for pid, role in children.items()}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document))
    os.replace(tmp, path)


class Role(enum.StrEnum):
    API = "api"
    MANAGER = "manager"
    DATAPLANE = "dataplane"  # the data plane's host (only with the data plane on)


def _run_data_plane(settings: ServiceSettings, supervisor_pid: int) -> None:
    """The data plane's host process (:mod:`deepedge.controlplane.serving_host`)."""
    from deepedge.controlplane import serving_host

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    try:
        serving_host.run(settings, done, supervisor_pid)
    except Exception:
        log.exception("the data plane's host failed")
        raise


def serve(
    settings: ServiceSettings,
    host: str = "127.0.0.1",
    port: int = 8750,
    supervise: bool = True,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; ``on_listening(port)`` is called once the socket is bound
    (connections queue from then on), before any process is forked."""
    sock = _listen(host, port)
    if on_listening is not None:
        on_listening(int(sock.getsockname()[1]))
        sys.stdout.flush()  # nothing buffered may be written twice by the forked children
    if not supervise:
        _serve_on(_warm(settings), sock)
        return
    pipe = WakePipe.create()
    app = _warm(settings, wake_fd=pipe.write_fd)
    stopping = False
    children: dict[int, Role] = {}

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    supervisor_pid = os.getpid()

    def _fork(role: Role) -> None:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                if role is Role.API:
                    _serve_on(app, sock)
                elif role is Role.DATAPLANE:
                    sock.close()
                    os.setsid()
                    _run_data_plane(settings, supervisor_pid)
                else:
                    sock.close()
                    # Its own session: where the kernel groups CPU shares by session
                    # (autogroup), deploying and watching jobs then cannot take the API's share.
                    os.setsid()
                    _run_manager(settings, pipe.read_fd, supervisor_pid)
            finally:
                os._exit(0)
        children[pid] = role
        _record_roles(settings, children)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    roles = [r for r in Role if r is not Role.DATAPLANE or settings.serving]
    started = {role: time.monotonic() for role in roles}
    quick_deaths = dict.fromkeys(roles, 0)
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
        log.warning("%s process %d %s; starting a new one", role.value, pid, cause)
        quick = time.monotonic() - started[role] < RESTART_FLOOR_S
        quick_deaths[role] = quick_deaths[role] + 1 if quick else 0
        if quick_deaths[role] > 5:
            time.sleep(min(2.0 ** quick_deaths[role] / 32, 10.0))
        started[role] = time.monotonic()
        _fork(role)
    sock.close()


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
    parser.add_argument("--data-plane", action="store_true", help="serve deployments (Ray Serve)")
    parser.add_argument("--data-plane-host", default="127.0.0.1")
    parser.add_argument("--data-plane-port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    settings = ServiceSettings(
        data_dir=args.data_dir,
        database_url=args.db,
        ray_address=args.ray_address,
        learners_on_ray=args.learners_on_ray and bool(args.ray_address),
        serving=args.data_plane,
        serving_host=args.data_plane_host,
        serving_port=args.data_plane_port,
    )
    serve(settings, args.host, args.port, supervise=not args.no_supervise)
    sys.exit(0)


if __name__ == "__main__":
    main()
