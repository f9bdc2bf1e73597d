"""The data plane's host: the process of the service that keeps the data plane running.

``deepedge serve`` (with the data plane on) runs this as one of its supervised processes,
beside the API and the manager. It

1. gets a Ray cluster: the one named by the service's Ray address, or an embedded head of
   its own on this machine (:class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster` with no
   workers, recorded by :mod:`deepedge.service.embedded_ray`, so a restarted host re-attaches
   to a head that is still up instead of starting another; the service's learners keep a
   Ray of their own inside their sandboxes: Ray runs any code it is given, so tenant code
   never reaches the site's);
2. starts the data plane there (:func:`deepedge.runtime.serving.dataplane.start_data_plane`:
   the data plane's own ingress on the configured address with Ray Serve behind it on
   loopback, the controller reading the serving table from this service's store and
   keeping its moves in the journal of serving decisions on this machine's disk, the
   sample writer on this machine's disk);
3. watches: a head that dies is started again (and the data plane with it, from the store);
   a start that fails is tried again after a back-off, and each state (starting with the
   step it is at, serving, retrying with the reason) is written down for the API, every
   few seconds while a start runs too
   (:mod:`deepedge.controlplane.data_plane_health`). The readiness probe goes through the
   ingress, so a reason says which part did not answer: nothing listening at the address
   (the ingress), or the ingress's 503 (Serve behind it).

A stop (SIGTERM or SIGINT) that comes during a start interrupts it: the start is abandoned
where it is and what it started is stopped, instead of the host first finishing a start
that can take a minute (a service stopped soon after it started waited for that).

The API and the manager never talk to Ray for serving: if either crashes, Serve goes on
answering. When the service stops (or its supervisor is gone) the embedded head stops too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from deepedge.controlplane.data_plane_health import (
    HEARTBEAT_S,
    DataPlaneHealth,
    DataPlaneState,
    write_health,
)
from deepedge.controlplane.serving import TableSource, serving_capacity
from deepedge.dataplane.sample_store import sample_store_path
from deepedge.dataplane.serving_decisions import decisions_path
from deepedge.service.config import ServiceSettings
from deepedge.service.embedded_ray import (
    HeadRecord,
    forget_head,
    read_head,
    stop_head,
    write_head,
)

log = logging.getLogger(__name__)

WATCH_S = HEARTBEAT_S  # a heartbeat and a readiness probe this often
PROBE_TIMEOUT_S = 5.0
PROBE_MISSES = 3  # probes in a row without an answer before the data plane is started again
READY_WAIT_S = 120.0  # from a finished start to the first ready answer
RETRY_BASE_S = 2.0
RETRY_CAP_S = 60.0


STARTING_RAY = "starting Ray's head and Serve"  # a start's first step, as its reason
NOT_READY = "started; the readiness probe: "  # then what the probe saw


@contextlib.contextmanager
def _beating(beat: Callable[[], None], period_s: float) -> Iterator[None]:
    """``beat()`` every ``period_s`` from a thread while the block runs: a start that takes
    a minute or more on a loaded machine (Ray's head, Serve, the replicas) is still
    reported, so a reader sees it starting, not a silent host
    (``data_plane_health.STALE_S``)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(period_s):
            beat()

    thread = threading.Thread(target=loop, daemon=True, name="data-plane-heartbeat")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class _StartInterrupted(BaseException):
    """A stop during a start, raised in the host's thread by the stop's signal. Not an
    :class:`Exception`: the start's own handlers (a failure is retried) must not catch it,
    as they do not catch ``KeyboardInterrupt``."""


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def _interruptible(stop: threading.Event) -> Iterator[Callable[[], None]]:
    """While the block runs, SIGTERM and SIGINT set ``stop`` and raise
    :class:`_StartInterrupted` in it; the handlers before (the process's) are restored after.
    It is given a function that puts the block's handlers back: ``ray.init`` puts Ray's in
    their place, and Ray's ends the process at once (``SystemExit``), leaving the head it
    started running; that exit, raised in the block by a stop that came while ``ray.init``
    ran, is taken for the stop it is.

    Only on the main thread, the one where Python runs signal handlers: a host run on a
    thread of its own sees a stop once its start has ended, as before."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def interrupt(signum: int, _frame: object) -> None:
        stop.set()
        raise _StartInterrupted(signum)

    def arm() -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, interrupt)

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    arm()
    try:
        if stop.is_set():  # (a stop that came before the handlers)
            raise _StartInterrupted(signal.SIGTERM)
        yield arm
    except SystemExit as exc:
        if exc.code not in STOP_SIGNALS:
            raise
        # Ray's own handler (``sys.exit(signum)``) ran: the stop came while ``ray.init``
        # ran, after it put its handler in place and before the block put this one back.
        # A stop all the same; left to end the process, it left the head running.
        stop.set()
        raise _StartInterrupted(exc.code) from exc
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def start_head(settings: ServiceSettings) -> HeadRecord:
    """A fresh embedded head (any recorded one is stopped first), recorded on disk."""
    from deepedge.runtime.cluster.local_cluster import HEAD_ID, LocalRayCluster

    old = read_head(settings.data_dir)
    if old is not None:
        stop_head(old)
    # Ray starts its workers at niceness 15 by default (to keep its own daemons responsive):
    # here they are the replicas answering the site's cameras, the latency-critical work,
    # and must not rank below a learner (a job may run niced: its manifest's ``nice``).
    extra: dict[str, str] = {"RAY_worker_niceness": "0"}
    state = None
    if settings.serving_high_throughput:
        from deepedge.runtime.serving.serve_apps import high_throughput_env

        state = tempfile.mkdtemp(prefix="deserve-")  # short: it holds a Unix socket
        extra.update(high_throughput_env(Path(state)))
    cluster = LocalRayCluster(
        worker_ids=(),
        cpus_per_node=settings.serving_cpus or os.cpu_count() or 1,
        object_store_mb=settings.serving_object_store_mb,
        die_with_parent=True,  # the head never outlives this host, however it ends
        extra_env=extra,
    )
    try:
        cluster.start()
        process = cluster.nodes[HEAD_ID].process
        assert process is not None
        record = HeadRecord(cluster.address, str(cluster.root), process.pid,
                            {"RAY_AUTH_MODE": cluster.env.get("RAY_AUTH_MODE", "")},
                            state)  # fmt: skip
        write_head(settings.data_dir, record)
    except BaseException:  # a failed or interrupted start leaves no head unrecorded
        cluster.stop()
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)
        raise
    return record


def connect(address: str) -> None:
    """This process's Ray driver, on the cluster at ``address``."""
    from deepedge.runtime.cluster.session import ensure_ray

    ensure_ray(address=address)


def boot(settings: ServiceSettings, address: str) -> None:
    """Start (or confirm) the data plane on the cluster at ``address``."""
    from deepedge.runtime.serving.dataplane import DataPlaneAddress, start_data_plane

    start_data_plane(
        address,
        DataPlaneAddress(settings.serving_host, settings.serving_port),
        TableSource(settings.url, str(settings.data_dir), *serving_capacity(settings)),
        sample_store_path(settings.data_dir),
        decisions_path=decisions_path(settings.data_dir),
    )


def _head_address(
    settings: ServiceSettings, head: HeadRecord | None
) -> tuple[HeadRecord | None, str]:
    """The Ray cluster to serve on: the operator's, or the embedded head (re-attached when
    it is still up, else started)."""
    if settings.ray_address is not None:
        return None, settings.ray_address
    if head is None or not head.alive():
        head = read_head(settings.data_dir)
        if head is None or not head.alive():
            head = start_head(settings)
        else:
            log.info("re-attaching to the data plane's Ray head at %s", head.address)
    if head.env.get("RAY_AUTH_MODE") == "token":
        from deepedge.runtime.cluster.local_cluster import ensure_token_auth

        ensure_token_auth({})  # as the head was started: with Ray's token
    return head, head.address


def probe_url(settings: ServiceSettings) -> str:
    host = settings.serving_host
    host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.serving_port}/v2/health/ready"


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """What the data plane did when asked at ``url`` whether it is ready (KServe's
    ``/v2/health/ready``, through its ingress), in a few words; empty when it is."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            body = answer.read()
            if answer.status == 200 and json.loads(body or b"{}").get("ready"):
                return ""
            return f"answered {answer.status} {body[:120]!r}"
    except urllib.error.HTTPError as exc:
        said = exc.read()[:120]
        part = "Serve behind the ingress did not answer" if exc.code == 503 else "answered"
        return f"{part}: {exc.code} {said!r}"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return "nothing listens there (the data plane's ingress is down)"
        return f"no answer: {exc.reason}"
    except (OSError, ValueError) as exc:
        return f"no answer: {type(exc).__name__}: {exc}"


def _one_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run(settings: ServiceSettings, stop: threading.Event, parent_pid: int | None = None) -> None:
    """The host's life (module docstring) until ``stop`` is set or the parent is gone.

    Nothing here gives up: a start that fails (Ray's head timing out on a loaded machine,
    Serve not coming up) is tried again after a back-off of :data:`RETRY_BASE_S` doubling
    to :data:`RETRY_CAP_S`, and every step is written down for the API
    (:mod:`~deepedge.controlplane.data_plane_health`): starting (with its step: Ray and
    Serve, then what the readiness probe saw), serving once the data plane answers its
    readiness probe, retrying with the reason and the time of the next try. A start writes
    a heartbeat while it runs: on a loaded machine it takes a minute or more, and a host
    silent for ``STALE_S`` reads failed."""
    from deepedge.runtime.cluster.session import shutdown_ray

    url = probe_url(settings)
    now = time.time()
    health = DataPlaneHealth(DataPlaneState.STARTING, since=now, updated_at=now,
                             pid=os.getpid(), url=url.removesuffix("/health/ready"))  # fmt: skip
    head: HeadRecord | None = None
    failures = misses = 0

    def gone() -> bool:
        return parent_pid is not None and os.getppid() != parent_pid

    lock = threading.RLock()  # (a start's heartbeat writes from a thread of its own)

    def record(state: DataPlaneState, **changes: object) -> None:
        nonlocal health
        with lock:
            health = health.moved_to(state, time.time(), **changes)
            write_health(settings.data_dir, health)

    def still_starting() -> None:
        with lock:
            if health.state is DataPlaneState.STARTING:
                record(DataPlaneState.STARTING, reason=health.reason)

    try:
        while not stop.is_set() and not gone():
            if not health.serving:
                record(DataPlaneState.STARTING, attempt=health.attempt + 1,
                       reason=STARTING_RAY)  # fmt: skip
                try:
                    with _beating(still_starting, HEARTBEAT_S), _interruptible(stop) as rearm:
                        head, address = _head_address(settings, head)
                        connect(address)
                        rearm()  # (Ray's handlers in place of the start's since ray.init)
                        boot(settings, address)
                        shutdown_ray()  # the detached actors and Serve run on without this driver
                        deadline = time.monotonic() + READY_WAIT_S
                        while why := probe(url):
                            if time.monotonic() > deadline:
                                raise TimeoutError(f"not ready at {url} within "
                                                   f"{READY_WAIT_S:.0f} s ({why})")  # fmt: skip
                            if health.reason != f"{NOT_READY}{why}":
                                record(DataPlaneState.STARTING, reason=f"{NOT_READY}{why}")
                            if stop.wait(1.0) or gone():
                                return
                except _StartInterrupted:
                    log.warning("the data plane's start was stopped")
                    shutdown_ray()
                    if head is None and settings.ray_address is None:
                        head = read_head(settings.data_dir)  # (started, not yet returned)
                    return
                except Exception as exc:  # any failure is retried and reported
                    failures += 1
                    delay = min(RETRY_BASE_S * 2 ** (failures - 1), RETRY_CAP_S)
                    log.warning("the data plane did not start (attempt %d: %s); again in %.0f s",
                                health.attempt, _one_line(exc), delay)  # fmt: skip
                    shutdown_ray()
                    record(DataPlaneState.RETRYING, reason=_one_line(exc),
                           retry_at=time.time() + delay)  # fmt: skip
                    if stop.wait(delay):
                        return
                    continue
                failures = misses = 0
                record(DataPlaneState.SERVING)
                log.warning("data plane serving at http://%s:%d/v2", settings.serving_host,
                            settings.serving_port)  # fmt: skip
            if stop.wait(WATCH_S):
                return
            if head is not None and not head.alive():
                log.warning("the data plane's Ray head died; starting it again")
                record(DataPlaneState.RETRYING, reason="the data plane's Ray head died",
                       retry_at=time.time())  # fmt: skip
                continue
            why = probe(url)
            misses = misses + 1 if why else 0
            if misses >= PROBE_MISSES:
                log.warning("the data plane has not answered %d readiness probes (%s); starting"
                            " it again", misses, why)  # fmt: skip
                why = f"no answer to {misses} readiness probes at {url} ({why})"
                record(DataPlaneState.RETRYING, retry_at=time.time(), reason=why)
                continue
            record(DataPlaneState.SERVING)  # the heartbeat
    finally:  # (also when Ray's own SIGTERM handler turns the stop into SystemExit)
        if head is not None:
            stop_head(head)
            forget_head(settings.data_dir)
