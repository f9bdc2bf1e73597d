"""A loopback parameter server and emulated peer workers, for profiling t_update.

The parameter server is a separate process listening on 127.0.0.1 (a real TCP socket, real
serialisation). It holds the flat parameter vector ``w`` and serves *push-pull*: a worker
sends its gradient ``g``, the server applies the SGD update

    w <- w - lr * g

under a lock (asynchronous data parallelism: updates from different workers interleave)
and replies with the new ``w`` and the seconds it spent on the update. A worker's update
time is the round trip ``t_update = t_push + t_update_server + t_pull``.

:class:`PeerWorkers` emulates the other ``|W| - 1`` workers of a cluster on one machine:
each peer is a process that pushes a zero gradient of the model's size every
``interval_s`` (the compute time of its own batch), so the server sees the queueing of
``|W|`` workers without the peers also training on the profiled CPU.

Both run as ``python -m deepedge.profiling.loopback_ps serve|peer`` (numpy only); the
authentication key travels in the environment, the server's port on its first stdout line.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener
from types import TracebackType
from typing import Any

import numpy as np

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.profiling.child import python_module, start_child, stderr_tail, stop_children

_MODULE = "deepedge.profiling.loopback_ps"
_AUTHKEY_ENV = "DEEPEDGE_PS_AUTHKEY"
Address = tuple[str, int]


def _serve_connection(conn: Connection, state: dict[str, Any], lock: threading.Lock) -> None:
    with contextlib.suppress(EOFError, OSError), conn:
        while True:
            message = conn.recv()
            if message[0] == "push":
                start = time.perf_counter()
                with lock:
                    if state["w"] is None:
                        state["w"] = np.zeros_like(message[1])
                    state["w"] -= state["lr"] * message[1]
                    state["pushes"] += 1
                    weights = state["w"].copy()
                conn.send((weights, time.perf_counter() - start))
            elif message[0] == "init":
                with lock:
                    state["w"] = np.asarray(message[1], dtype=np.float32).copy()
                conn.send(("ok", 0.0))
            elif message[0] == "stats":
                with lock:
                    conn.send((state["pushes"], 0.0))
            else:
                return


def _serve(lr: float, authkey: bytes) -> None:
    listener = Listener(("127.0.0.1", 0), authkey=authkey)
    sys.stdout.write(f"{listener.address[1]}\n")
    sys.stdout.flush()
    state: dict[str, Any] = {"w": None, "lr": lr, "pushes": 0}
    lock = threading.Lock()
    while True:
        conn = listener.accept()
        threading.Thread(target=_serve_connection, args=(conn, state, lock), daemon=True).start()


def _peer(port: int, authkey: bytes, n_params: int) -> None:
    """Reads ``run <interval_s>`` / ``pause`` lines from stdin; pushes while running."""
    client = PsClient(("127.0.0.1", port), authkey)
    grad = np.zeros(n_params, dtype=np.float32)
    interval_s: float | None = None
    next_t = time.monotonic()
    stdin = sys.stdin.fileno()
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ)
    pending = b""
    while True:
        timeout = None if interval_s is None else max(0.0, next_t - time.monotonic())
        if selector.select(timeout):
            # Raw reads, not readline: a buffered reader could swallow a second command
            # ("run" then "pause" arriving together) where select would never see it.
            data = os.read(stdin, 4096)
            if not data:
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                words = line.split()
                if words and words[0] == b"run":
                    interval_s = float(words[1])
                    next_t = time.monotonic()
                else:
                    interval_s = None
            continue
        if interval_s is not None:
            client.push_pull(grad)
            next_t = max(next_t + interval_s, time.monotonic())


@dataclass(frozen=True, slots=True)
class PushPull:
    weights: np.ndarray
    round_trip_s: float  # t_push + t_update_server + t_pull
    server_update_s: float


class PsClient:
    """One worker's connection to the server."""

    def __init__(self, address: Address, authkey: bytes) -> None:
        self._conn = Client(address, authkey=authkey)

    def init(self, weights: np.ndarray) -> None:
        self._conn.send(("init", weights))
        self._conn.recv()

    def push_pull(self, grad: np.ndarray) -> PushPull:
        start = time.perf_counter()
        self._conn.send(("push", grad))
        weights, update_s = self._conn.recv()
        return PushPull(weights, time.perf_counter() - start, float(update_s))

    def pushes_served(self) -> int:
        """How many pushes the server has applied so far, from every worker."""
        self._conn.send(("stats",))
        count, _ = self._conn.recv()
        return int(count)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(("bye",))
        self._conn.close()


class LoopbackParameterServer:
    """Context manager running the server process, initialised with ``init_weights``."""

    def __init__(self, init_weights: np.ndarray, lr: float = 0.05) -> None:
        if init_weights.ndim != 1 or init_weights.size == 0:
            raise InvalidInputError("init_weights must be a non-empty flat vector", "init_weights")
        self._init = init_weights.astype(np.float32)
        self.lr = lr
        self.authkey = secrets.token_bytes(16)
        self.address: Address | None = None
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def n_params(self) -> int:
        return int(self._init.size)

    def __enter__(self) -> LoopbackParameterServer:
        env = {**os.environ, _AUTHKEY_ENV: self.authkey.hex()}
        proc = start_child(
            python_module(_MODULE, "serve", "--lr", str(self.lr)), stdout=subprocess.PIPE, env=env
        )
        self._procs.append(proc)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode().strip()
            if not line.isdigit():
                raise RunFailedError(f"the parameter server failed to start: {stderr_tail(proc)}")
            self.address = ("127.0.0.1", int(line))
            client = self.client()
            client.init(self._init)
            client.close()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        procs, self._procs = self._procs, []
        stop_children(procs)

    def client(self) -> PsClient:
        if self.address is None:
            raise RunFailedError("the parameter server is not running")
        return PsClient(self.address, self.authkey)


class PeerWorkers:
    """``n_peers`` emulated workers; :meth:`run` sets how many push and at which cadence."""

    def __init__(self, server: LoopbackParameterServer, n_peers: int) -> None:
        if server.address is None:
            raise RunFailedError("start the parameter server before its peers")
        self._server = server
        self.n_peers = max(0, n_peers)
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> PeerWorkers:
        assert self._server.address is not None
        env = {**os.environ, _AUTHKEY_ENV: self._server.authkey.hex()}
        args = ["peer", "--port", str(self._server.address[1])]
        args += ["--n-params", str(self._server.n_params)]
        try:
            for _ in range(self.n_peers):
                self._procs.append(
                    start_child(python_module(_MODULE, *args), stdin=subprocess.PIPE, env=env)
                )
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def run(self, intervals_s: list[float]) -> None:
        """Peer k pushes every ``intervals_s[k]``; peers beyond the list pause."""
        if len(intervals_s) > self.n_peers:
            raise InvalidInputError(
                f"{len(intervals_s)} active peers requested, only {self.n_peers} exist", "n_workers"
            )
        for k, proc in enumerate(self._procs):
            if proc.poll() is not None or proc.stdin is None:
                raise RunFailedError(f"emulated peer {k} exited: {stderr_tail(proc)}")
            line = f"run {intervals_s[k]:.6f}\n" if k < len(intervals_s) else "pause\n"
            proc.stdin.write(line.encode())
            proc.stdin.flush()

    def close(self) -> None:
        procs, self._procs = self._procs, []
        stop_children(procs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=_MODULE)
    parser.add_argument("role", choices=["serve", "peer"])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--n-params", type=int, default=0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    authkey = bytes.fromhex(os.environ[_AUTHKEY_ENV])
    if args.role == "serve":
        _serve(args.lr, authkey)
    else:
        _peer(args.port, authkey, args.n_params)


if __name__ == "__main__":
    main()
