"""The ingress's request log, read: what a client sees, counted and sent to the store.

Each HAProxy of the data plane's ingress (:mod:`deepedge.runtime.serving.ingress`) writes
one line per request it answered
(:data:`~deepedge.dataplane.ingress_traffic.LOG_FORMAT`) to its standard output: a pipe
whose other end :class:`IngressLog` holds. HAProxy never waits on its log (it drops a line a
full pipe would not take), so the pipe is made deep (:data:`PIPE_BYTES`, thousands of
lines) and read by a thread of its own, which counts each inference request per model and
second (:class:`~deepedge.dataplane.ingress_traffic.IngressCounter`) and, once a second,
hands the finished seconds to a sink: the data plane's sample writer (:class:`WriterSink`).

The seconds it covers run from when its HAProxy listens (:meth:`IngressLog.listening`) to
the end of the pipe (HAProxy exited); a HAProxy started again has a new log. A hand-over
that fails is logged and its figures dropped: their seconds are then not covered, and the
traffic answer says so rather than showing a figure of part of the requests.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from deepedge.dataplane.ingress_traffic import GRACE_S, IngressCounter, IngressRow, parse_line

log = logging.getLogger(__name__)

PIPE_BYTES = 1 << 20  # the pipe's depth (Linux's limit for a user's pipe by default)
FLUSH_S = 1.0  # how often the finished seconds are handed over
SEND_TIMEOUT_S = 5.0
MAX_LINE_BYTES = 16384  # a longer "line" is not HAProxy's: dropped
READ_BYTES = 65536

Sink = Callable[[Sequence[IngressRow], Sequence[int]], None]


def log_pipe() -> tuple[int, int]:
    """A pipe for HAProxy's log (read end, write end), as deep as the kernel allows up to
    :data:`PIPE_BYTES`."""
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):  # (a user over its pipe allowance keeps 64 KiB)
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_fd, write_fd


class IngressLog:
    """One HAProxy's log, read by a thread until its end (module docstring); it owns
    ``read_fd``. Times come from ``clock`` (wall-clock seconds)."""

    def __init__(self, read_fd: int, sink: Sink, clock: Callable[[], float] = time.time,
                 flush_s: float = FLUSH_S) -> None:  # fmt: skip
        self._fd = read_fd
        self._sink = sink
        self._clock = clock
        self._flush_s = flush_s
        self._counter = IngressCounter()
        self._lock = threading.Lock()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="ingress-log", daemon=True)
        self._thread.start()

    def listening(self, since_s: float) -> None:
        """HAProxy listens from ``since_s``: the seconds from then on are covered."""
        with self._lock:
            self._counter.watch(since_s)

    def join(self, timeout_s: float) -> bool:
        """Wait for the log's end (HAProxy exited) and its last hand-over."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        pending = b""
        next_flush = self._clock() + self._flush_s
        try:
            while True:
                wait_s = max(0.0, next_flush - self._clock())
                ready, _, _ = select.select([self._fd], [], [], wait_s)
                if ready:
                    chunk = os.read(self._fd, READ_BYTES)
                    if not chunk:
                        break
                    *lines, pending = (pending + chunk).split(b"\n")
                    self._count(lines)
                    if len(pending) > MAX_LINE_BYTES:
                        pending = b""
                now = self._clock()
                if now >= next_flush:
                    with self._lock:
                        rows, covered = self._counter.take(now - GRACE_S)
                    self._send(rows, covered)
                    next_flush = now + self._flush_s
        except Exception:  # figures only: never more than a log line
            log.exception("the ingress's log: reading it failed")
        finally:
            with self._lock:
                self._counter.unwatch(self._clock())
                rows, covered = self._counter.take(None)
            os.close(self._fd)
            self._send(rows, covered)

    def _count(self, lines: list[bytes]) -> None:
        requests = [parse_line(line.decode(errors="replace")) for line in lines]
        with self._lock:
            for request in requests:
                if request is not None:
                    self._counter.add(request)

    def _send(self, rows: Sequence[IngressRow], covered: Sequence[int]) -> None:
        if not rows and not covered:
            return
        try:
            self._sink(rows, covered)
        except Exception as exc:
            if not self._failing:  # (once per run of failures: the writer may be starting)
                log.warning("the ingress's figures of %d s not recorded (%s); those seconds "
                            "show as not covered", len(covered), exc)  # fmt: skip
            self._failing = True
        else:
            self._failing = False


class WriterSink:
    """Sends figures to the data plane's sample writer, found by its name when first needed
    and again after a failure (the writer restarts on its own); picklable."""

    def __init__(self) -> None:
        self._writer: Any = None

    def __call__(self, rows: Sequence[IngressRow], covered: Sequence[int]) -> None:
        import ray

        from deepedge.runtime.serving.serve_apps import NAMESPACE, WRITER

        if self._writer is None:
            self._writer = ray.get_actor(WRITER, namespace=NAMESPACE)
        try:
            ray.get(self._writer.record_ingress.remote(list(rows), list(covered)),
                    timeout=SEND_TIMEOUT_S)  # fmt: skip
        except Exception:
            self._writer = None
            raise


def discard(rows: Sequence[IngressRow], covered: Sequence[int]) -> None:
    """A sink that keeps nothing (an ingress run outside a data plane, in tests)."""
