"""The data plane's health: what its host writes, what a reader concludes, and a host
that keeps trying (and says so) when a start fails, with Ray and Serve replaced by stubs
at the host's own seams (the real start is tests/controlplane/test_serving_host.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from _support import wait_until
from deepedge.controlplane import data_plane_health as dph
from deepedge.controlplane import serving_host
from deepedge.controlplane.data_plane_health import DataPlaneHealth, DataPlaneState
from deepedge.core.errors import IllegalTransitionError
from deepedge.service.config import ServiceSettings
from deepedge.service.embedded_ray import HeadRecord

DOWN = "nothing listens there (the data plane's ingress is down)"


def _health(state: DataPlaneState, at: float = 100.0, **kw: object) -> DataPlaneHealth:
    return DataPlaneHealth(state, since=at, updated_at=at, pid=os.getpid(), **kw)  # type: ignore[arg-type]


def test_a_service_without_a_data_plane_says_off() -> None:
    shown = dph.judge(_health(DataPlaneState.SERVING), enabled=False, writer_alive=True, now=101)
    assert shown.state is DataPlaneState.OFF and not shown.serving


def test_no_report_yet_is_starting_never_serving() -> None:
    shown = dph.judge(None, enabled=True, writer_alive=False, now=5.0)
    assert shown.state is DataPlaneState.STARTING and "not reported" in shown.reason


def test_a_report_whose_writer_died_is_failed_with_its_last_state() -> None:
    recorded = _health(DataPlaneState.RETRYING, reason="TimeoutError: node timed out")
    shown = dph.judge(recorded, enabled=True, writer_alive=False, now=150.0)
    assert shown.state is DataPlaneState.FAILED
    assert "not running" in shown.reason and "node timed out" in shown.reason
    assert shown.since == recorded.updated_at


def test_a_silent_writer_is_not_believed() -> None:
    recorded = _health(DataPlaneState.SERVING)
    fresh = dph.judge(recorded, enabled=True, writer_alive=True, now=100 + dph.STALE_S - 1)
    assert fresh.serving
    stale = dph.judge(recorded, enabled=True, writer_alive=True, now=100 + dph.STALE_S + 5)
    assert stale.state is DataPlaneState.FAILED and "not reported for" in stale.reason


def test_moves_follow_the_transition_table_and_keep_since_on_a_heartbeat() -> None:
    h = _health(DataPlaneState.STARTING)
    serving = h.moved_to(DataPlaneState.SERVING, 110.0)
    beat = serving.moved_to(DataPlaneState.SERVING, 112.0)
    assert (beat.since, beat.updated_at) == (110.0, 112.0)
    retry = beat.moved_to(DataPlaneState.RETRYING, 113.0, reason="x", retry_at=120.0)
    assert retry.reason == "x" and retry.moved_to(DataPlaneState.STARTING, 120).reason == ""
    with pytest.raises(IllegalTransitionError):
        h.moved_to(DataPlaneState.OFF, 111.0)
    with pytest.raises(IllegalTransitionError):
        h.moved_to(DataPlaneState.FAILED, 111.0)  # a reader's conclusion, never written


def test_the_document_round_trips_private_to_the_service(tmp_path: Path) -> None:
    h = _health(DataPlaneState.RETRYING, reason="r", retry_at=130.0, attempt=3, url="u")
    dph.write_health(tmp_path, h)
    assert dph.read_health(tmp_path) == h
    assert dph.status_path(tmp_path).stat().st_mode & 0o777 == 0o600
    dph.status_path(tmp_path).write_text("{not json")
    assert dph.read_health(tmp_path) is None


def test_the_host_retries_a_failed_start_and_reports_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ServiceSettings(data_dir=tmp_path, serving=True, ray_address="127.0.0.1:1")
    starts: list[str] = []
    answering = threading.Event()
    seen: list[DataPlaneHealth] = []
    write = dph.write_health

    def record(data_dir: Path, health: DataPlaneHealth) -> None:
        seen.append(health)
        write(data_dir, health)

    def boot(_settings: ServiceSettings, address: str) -> None:
        starts.append(address)
        if len(starts) < 3:
            raise RuntimeError("Ray: node timed out during startup\n(and more lines)")
        answering.set()

    monkeypatch.setattr(serving_host, "write_health", record)
    monkeypatch.setattr(serving_host, "boot", boot)
    monkeypatch.setattr(serving_host, "probe",
                        lambda _url, timeout_s=0: "" if answering.is_set() else DOWN)  # fmt: skip
    monkeypatch.setattr(serving_host, "RETRY_BASE_S", 0.05)
    monkeypatch.setattr(serving_host, "WATCH_S", 0.05)
    monkeypatch.setattr("deepedge.runtime.cluster.session.shutdown_ray", lambda: None)
    monkeypatch.setattr(serving_host, "connect", lambda _address: None)
    stop = threading.Event()
    host = threading.Thread(target=serving_host.run, args=(settings, stop), daemon=True)
    host.start()
    try:
        assert wait_until(lambda: any(h.serving for h in seen), timeout_s=30, interval_s=0.05)
        retrying = [h for h in seen if h.state is DataPlaneState.RETRYING]
        assert len(retrying) == 2
        assert retrying[0].reason == "RuntimeError: Ray: node timed out during startup"
        assert retrying[0].retry_at is not None and retrying[0].attempt == 1
        first_serving = next(h for h in seen if h.serving)
        assert first_serving.attempt == 3 and first_serving.reason == ""
        shown = dph.current(tmp_path, enabled=True, now=first_serving.updated_at)
        assert shown.serving
        answering.clear()  # the data plane stops answering: after PROBE_MISSES, started again
        assert wait_until(lambda: any("readiness probes" in h.reason and DOWN in h.reason
                                      for h in seen), timeout_s=30, interval_s=0.05)  # fmt: skip
        assert wait_until(lambda: seen[-1].serving, timeout_s=30, interval_s=0.05)
        assert len(starts) == 4  # started again, and it answers once more
    finally:
        stop.set()
        host.join(10)
    assert not host.is_alive()


def test_a_slow_start_is_reported_as_starting_with_its_step_never_as_a_silent_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start that outlasts ``STALE_S`` (Ray's head on a loaded machine) keeps writing
    heartbeats, so a reader sees it starting (and at which step), not failed."""
    settings = ServiceSettings(data_dir=tmp_path, serving=True, ray_address="127.0.0.1:1")
    booted, answering = threading.Event(), threading.Event()
    seen: list[DataPlaneHealth] = []
    write = dph.write_health

    def record(data_dir: Path, health: DataPlaneHealth) -> None:
        seen.append(health)
        write(data_dir, health)

    monkeypatch.setattr(serving_host, "write_health", record)
    monkeypatch.setattr(serving_host, "boot", lambda _s, _a: booted.wait(30))
    monkeypatch.setattr(serving_host, "probe",
                        lambda _url, timeout_s=0: "" if answering.is_set() else DOWN)  # fmt: skip
    monkeypatch.setattr(serving_host, "HEARTBEAT_S", 0.02)
    monkeypatch.setattr(dph, "STALE_S", 0.5)
    monkeypatch.setattr("deepedge.runtime.cluster.session.shutdown_ray", lambda: None)
    monkeypatch.setattr(serving_host, "connect", lambda _address: None)
    stop = threading.Event()
    host = threading.Thread(target=serving_host.run, args=(settings, stop), daemon=True)
    host.start()
    try:
        # boot() blocks for longer than the (shortened) stale bound: still starting
        assert wait_until(lambda: len(seen) > 40, timeout_s=30, interval_s=0.02)
        assert {(h.state, h.reason) for h in seen} == {
            (DataPlaneState.STARTING, serving_host.STARTING_RAY)}  # fmt: skip
        assert seen[-1].updated_at - seen[0].updated_at > 0.5 and seen[-1].since == seen[0].since
        shown = dph.current(tmp_path, enabled=True, now=seen[-1].updated_at + 0.1)
        assert shown.state is DataPlaneState.STARTING
        booted.set()  # then the readiness probe's answer is the step
        assert wait_until(lambda: seen[-1].reason == serving_host.NOT_READY + DOWN,
                          timeout_s=30, interval_s=0.02)  # fmt: skip
        assert seen[-1].state is DataPlaneState.STARTING and seen[-1].attempt == 1
        answering.set()
        assert wait_until(lambda: seen[-1].serving, timeout_s=30, interval_s=0.02)
        assert seen[-1].reason == "" and seen[-1].attempt == 1
    finally:
        stop.set()
        booted.set()
        host.join(10)
    assert not host.is_alive()


BOOT_S = 30.0  # a start as slow as Ray's head and Serve on a loaded machine


def test_a_stop_during_a_start_ends_it_at_once_and_stops_the_head_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's stop (SIGTERM to its data plane's host, whose handler sets the stop)
    while the start still runs: the host returns at once, not once the start has run to
    its end (a service stopped soon after it started waited out its whole start), and
    stops the head it had started."""
    settings = ServiceSettings(data_dir=tmp_path, serving=True)
    head = HeadRecord("127.0.0.1:1", str(tmp_path / "ray"), os.getpid(), {})
    booting = threading.Event()
    stopped: list[HeadRecord] = []
    seen: list[DataPlaneHealth] = []

    def boot(_settings: ServiceSettings, _address: str) -> None:
        booting.set()
        for _ in range(int(BOOT_S / 0.1)):  # waiting on Ray, a little at a time
            time.sleep(0.1)

    monkeypatch.setattr(serving_host, "write_health", lambda _d, health: seen.append(health))
    monkeypatch.setattr(serving_host, "start_head", lambda _settings: head)
    monkeypatch.setattr(serving_host, "boot", boot)
    monkeypatch.setattr(serving_host, "probe", lambda _url, timeout_s=0: "")
    monkeypatch.setattr(serving_host, "stop_head", stopped.append)
    monkeypatch.setattr("deepedge.runtime.cluster.session.shutdown_ray", lambda: None)
    stop = threading.Event()
    rays: list[int] = []  # ray.init's handler, which ends the process (the head left running)

    def ray_handler(signum: int, _frame: object) -> None:
        rays.append(signum)
        stop.set()

    monkeypatch.setattr(serving_host, "connect",
                        lambda _address: signal.signal(signal.SIGTERM, ray_handler))  # fmt: skip
    sent: list[float] = []

    def stop_while_booting() -> None:
        if booting.wait(30):
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    def host_handler(_signum: int, _frame: object) -> None:
        stop.set()

    before = signal.signal(signal.SIGTERM, host_handler)  # as the service's host process
    stopper = threading.Thread(target=stop_while_booting, daemon=True)
    stopper.start()
    try:
        serving_host.run(settings, stop)  # on this (the main) thread, as in the host process
        returned = time.monotonic()
        assert signal.getsignal(signal.SIGTERM) is host_handler  # the host's, put back
    finally:
        stopper.join(35)
        signal.signal(signal.SIGTERM, before)
    assert sent and returned - sent[0] < 5.0, "the host finished its start before it stopped"
    assert stop.is_set() and stopped == [head] and rays == []
    assert not any(h.serving for h in seen)


def test_a_stop_while_ray_init_runs_is_a_stop_and_stops_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SIGTERM comes while ``ray.init`` connects the driver: Ray's own handler (it
    calls ``sys.exit(signum)``) is in place of the host's. The exit it raises is taken for
    the stop: the host returns, with the head it started stopped, instead of the process
    ending and leaving the head running."""
    settings = ServiceSettings(data_dir=tmp_path, serving=True)
    head = HeadRecord("127.0.0.1:1", str(tmp_path / "ray"), os.getpid(), {})
    stopped: list[HeadRecord] = []
    booted: list[str] = []
    monkeypatch.setattr(serving_host, "write_health", lambda _d, _health: None)
    monkeypatch.setattr(serving_host, "start_head", lambda _settings: head)
    monkeypatch.setattr(serving_host, "boot", lambda _s, address: booted.append(address))
    monkeypatch.setattr(serving_host, "stop_head", stopped.append)
    monkeypatch.setattr("deepedge.runtime.cluster.session.shutdown_ray", lambda: None)

    def ray_init(_address: str) -> None:  # as ray.init: its handler, then the stop comes
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(signum))
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):  # (delivered between bytecodes, at once)
            time.sleep(0.01)

    monkeypatch.setattr(serving_host, "connect", ray_init)
    stop = threading.Event()

    def host_handler(_signum: int, _frame: object) -> None:
        stop.set()

    before = signal.signal(signal.SIGTERM, host_handler)
    try:
        serving_host.run(settings, stop)
        assert signal.getsignal(signal.SIGTERM) is host_handler
    finally:
        signal.signal(signal.SIGTERM, before)
    assert stop.is_set() and stopped == [head] and booted == []


ANSWERS = {
    "/ready": (200, b'{"ready": true}'),
    "/not-yet": (200, b'{"ready": false}'),
    "/behind": (503, b'{"error":"the data plane is not answering"}'),  # the ingress's 503
}


class _Answers(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status, body = ANSWERS[self.path]
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(
    ("path", "said"),
    [("/ready", ""), ("/not-yet", "answered 200"),
     ("/behind", "Serve behind the ingress did not answer: 503"), ("", DOWN)],
)  # fmt: skip
def test_the_readiness_probe_says_which_part_did_not_answer(path: str, said: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if not path:  # nothing listens there any more
        server.shutdown()
        server.server_close()
    try:
        why = serving_host.probe(f"http://127.0.0.1:{port}{path or '/ready'}", timeout_s=5.0)
    finally:
        if path:
            server.shutdown()
            server.server_close()
    assert why.startswith(said) if said else why == ""
