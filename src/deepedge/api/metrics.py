"""Prometheus metrics (``GET /metrics``): job counts by status, API latency, recovery events.

They count every tenant's jobs, so they need the operator's token (``deepedge tenants
operator-token``), unless the operator started the service with ``--public-metrics``.

Job counts are read from the store at scrape time (so they are right after a restart), the
recovery counters from the manager; latency is observed by a small ASGI middleware keyed by
the route template (``/v1/jobs/{job_id}``), never the raw path, to keep label sets bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Receive, Scope, Send

from deepedge.api.dependencies import OperatorDep
from deepedge.dataplane.sample_store import Usage
from deepedge.service.recovery_events import RecoveryEvent
from deepedge.service.status import JobStatus

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

router = APIRouter(tags=["service"])


# Each app has its own registry (new_registry), kept in app.state.registry.
@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={403: {"description": "a tenant's token: metrics need the operator's"}},
)
def metrics(request: Request, _operator: OperatorDep) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class ServiceCollector(Collector):
    def __init__(
        self,
        counts: Callable[[], dict[JobStatus, int]],
        events: Callable[[], dict[str, int]],
    ) -> None:
        self._counts = counts
        self._events = events

    def collect(self) -> Iterator[Any]:
        jobs = GaugeMetricFamily("deepedge_jobs", "Jobs in the store by status", labels=["status"])
        for status, count in self._counts().items():
            jobs.add_metric([status.value], count)
        yield jobs
        recovery = CounterMetricFamily(
            "deepedge_recovery_events", "Recovery actions taken by the manager", labels=["event"]
        )
        events = self._events()
        for event in RecoveryEvent:
            recovery.add_metric([event.value], events.get(event.value, 0))
        yield recovery


class SampleStoreCollector(Collector):
    """What the site's sample store keeps per deployment, and what its retention rule
    evicted (a full store evicts, it never refuses a sample)."""

    def __init__(self, usage: Callable[[], dict[str, Usage]]) -> None:
        self._usage = usage

    def collect(self) -> Iterator[Any]:
        usage = self._usage()
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "samples": GaugeMetricFamily("deepedge_samples_stored",
                                         "Sampled requests kept, by deployment id",
                                         labels=["deployment"]),
            "bytes": GaugeMetricFamily("deepedge_samples_bytes",
                                       "Bytes of sampled inputs kept, by deployment id",
                                       labels=["deployment"]),
            "appended": CounterMetricFamily("deepedge_samples_appended",
                                            "Sampled requests stored, by deployment id",
                                            labels=["deployment"]),
            "evicted": CounterMetricFamily("deepedge_samples_evicted",
                                           "Samples evicted by the retention rule, by "
                                           "deployment id", labels=["deployment"]),
        }  # fmt: skip
        for deployment, u in sorted(usage.items()):
            for field, family in families.items():
                family.add_metric([deployment], getattr(u, field))
        yield from families.values()


def new_registry() -> tuple[CollectorRegistry, Histogram]:
    registry = CollectorRegistry()
    latency = Histogram(
        "deepedge_api_request_seconds",
        "API request latency",
        labelnames=["method", "route", "status"],
        buckets=LATENCY_BUCKETS_S,
        registry=registry,
    )
    return registry, latency


class LatencyMiddleware:
    """Pure ASGI (no response buffering, so log streams stay streams)."""

    def __init__(self, app: ASGIApp, latency: Histogram) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status_holder = {"status": 500}

        async def _send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, _send)
        finally:
            self.latency.labels(
                scope["method"], _route_of(scope), str(status_holder["status"])
            ).observe(time.perf_counter() - started)


def _route_of(scope: Scope) -> str:
    """The template of the route the router matched (it records it in the scope), so no
    route is matched twice per request."""
    route = scope.get("route")
    return str(getattr(route, "path", "<unmatched>")) if route is not None else "<unmatched>"
