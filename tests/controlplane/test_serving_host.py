"""The data plane's host for real: an embedded Ray head with Serve's HAProxy ingress, as
``deepedge serve`` starts it, listens on loopback only (Ray's GCS, raylet, agents, workers
and metrics exporters; HAProxy's stats page and Prometheus exporter), and none of it
answers at another address of the host."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from _support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_the_embedded_data_plane_listens_on_loopback_only(tmp_path: Path) -> None:
    from deepedge.api.local_server import free_port
    from deepedge.bench.isolation_host import (
        Listener,
        answers,
        haproxy_config,
        haproxy_ports,
        head_processes,
        host_addresses,
        listeners,
    )
    from deepedge.controlplane import serving_host
    from deepedge.controlplane.data_plane_health import read_health
    from deepedge.service.config import ServiceSettings
    from deepedge.service.embedded_ray import read_head, session_processes
    from deepedge.service.store import JobStore

    settings = ServiceSettings(data_dir=tmp_path / "data", serving=True,
                               serving_port=free_port(), serving_cpus=2)  # fmt: skip
    settings.data_dir.mkdir(parents=True)
    store = JobStore(settings.url)
    store.migrate()
    store.dispose()
    stop = threading.Event()
    host = threading.Thread(target=serving_host.run, args=(settings, stop), daemon=True)
    host.start()
    live = f"http://127.0.0.1:{settings.serving_port}/v2/health/live"

    def serving() -> bool:
        record = read_head(settings.data_dir)
        if record is None or record.state_dir is None:
            return False
        try:
            up = httpx.get(live, timeout=2.0, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False
        return up and haproxy_config(Path(record.state_dir)) is not None

    try:
        assert wait_until(serving, timeout_s=300, interval_s=1.0), "the data plane never answered"
        assert wait_until(lambda: (h := read_health(settings.data_dir)) is not None and h.serving,
                          timeout_s=60, interval_s=0.5), read_health(settings.data_dir)  # fmt: skip
        record = read_head(settings.data_dir)
        assert record is not None and record.state_dir is not None
        found: list[Listener] = []

        def complete() -> bool:  # (Serve reloads HAProxy as its routes change: a new process)
            found[:] = listeners(head_processes(record))
            return {"gcs_server", "raylet", "haproxy"} <= {li.process for li in found}

        assert wait_until(complete, timeout_s=60, interval_s=1.0), [str(li) for li in found]
        assert [str(li) for li in found if not li.loopback] == []
        ports = haproxy_ports(Path(record.state_dir))
        stats = httpx.get(f"http://127.0.0.1:{ports['listen stats']}/stats;csv",
                          timeout=5.0, trust_env=False)  # fmt: skip
        assert stats.status_code == 200 and stats.text.startswith("# pxname")  # the operator's
        elsewhere = [(a, li.port) for a in host_addresses() for li in found if answers(a, li.port)]
        assert elsewhere == []
    finally:
        stop.set()
        host.join(120)
    assert read_head(settings.data_dir) is None  # the head stopped with its host
    assert session_processes(record.pid) == []  # all of it: Serve's HAProxy too
