"""Run the service: ``python -m deepedge.api.server --data-dir D [--db URL] [--port P]``.

``deepedge serve`` runs a small supervisor: it imports everything once, binds the listening
socket once, and forks the serving process (API + lifecycle manager) from that warm state.
If the serving process dies -- even by ``kill -9`` -- the supervisor forks a new one at
once: no imports to redo, and the socket never closes, so clients queue in its backlog
instead of being refused. The new process reconciles the store with the running learners
(:mod:`deepedge.service.manager`). ``--no-supervise`` runs the serving process alone.
Loopback by default.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from deepedge.api.app import create_app
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore

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


def _warm(settings: ServiceSettings) -> FastAPI:
    """Do once, before forking, everything a serving process would otherwise redo.

    Builds the app (routes, schemas) and touches the store so SQLAlchemy loads its dialect;
    the engine is disposed again, so no database connection is shared across the fork.
    """
    app = create_app(settings)
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


def serve(
    settings: ServiceSettings, host: str = "127.0.0.1", port: int = 8750, supervise: bool = True
) -> None:
    sock = _listen(host, port)
    app = _warm(settings)
    if not supervise:
        _serve_on(app, sock)
        return
    stopping = False
    child = 0

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child:
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    quick_deaths = 0
    while not stopping:
        started = time.monotonic()
        child = os.fork()
        if child == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                _serve_on(app, sock)
            finally:
                os._exit(0)
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        if stopping:
            break
        cause = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                 else f"exited with {os.WEXITSTATUS(status)}")  # fmt: skip
        log.warning("serving process %d %s; starting a new one", child, cause)
        quick_deaths = quick_deaths + 1 if time.monotonic() - started < RESTART_FLOOR_S else 0
        if quick_deaths > 5:
            time.sleep(min(2.0**quick_deaths / 32, 10.0))
    sock.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge-server")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--db", default=None, help="database URL (default: SQLite in data-dir)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8750)
    parser.add_argument("--no-supervise", action="store_true", help="no restarting supervisor")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    settings = ServiceSettings(data_dir=args.data_dir, database_url=args.db)
    serve(settings, args.host, args.port, supervise=not args.no_supervise)
    sys.exit(0)


if __name__ == "__main__":
    main()
