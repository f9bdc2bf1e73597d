"""A served model's requests as plain Python: the Open Inference Protocol over its sessions.

:class:`InferenceHandler` is everything a replica does for one model, whatever carries the
requests (Ray Serve's replica, :class:`deepedge.runtime.serving.model_server.ModelServer`, is a
thin adapter; tests drive it without Ray). Per request: the route under the model's
prefix and its method (:mod:`deepedge.dataplane.routes`), the inference key
(:mod:`deepedge.dataplane.keys`: refused only on the live keys read afresh, so this copy of
the key table answers as the front application's does), the body (bounded, inflated when compressed,
:mod:`deepedge.dataplane.content_encoding`), the tensors (:mod:`deepedge.dataplane.protocol`:
a non-finite input is a 400), the version (:mod:`deepedge.dataplane.routing`: the canary's
share drawn per request, or a pinned version), the forward pass in a dynamic batch (the
transport's ``run_batch``), a non-finite answer refused (422), a ``sample_fraction`` share
kept as samples (the transport's ``store_samples``: ``sampled: true`` only once they are
durable), the answer naming its version; feedback, metadata, readiness, Triton's config
and statistics; the per-second traffic figures counted.

:class:`ModelState` is the one state object of the served model in the replica: the route
(the serving table's :class:`~deepedge.dataplane.serving_table.ModelRoute`), the live keys
and the loaded versions, each a checked graph's session (:mod:`deepedge.dataplane.served_graph`).
A new table is loaded beside the old one (:meth:`InferenceHandler.loads`, blocking: off the
event loop) and swapped in at once (:meth:`InferenceHandler.swap`): a request sees both or
neither, and one in flight holds the session it chose, so a version dropped by the swap
still answers what it took.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from deepedge.core.errors import BadRequestError, DeepEdgeError, NotFoundError
from deepedge.dataplane.content_encoding import decode_body
from deepedge.dataplane.feedback import parse_feedback, unknown_error
from deepedge.dataplane.keys import KeyCheck, KeyGrant
from deepedge.dataplane.model_reports import (
    TrafficTotals,
    model_config,
    model_ready_document,
    model_statistics,
)
from deepedge.dataplane.protocol import (
    HEADER_LENGTH,
    body_limit,
    check_body_size,
    check_finite_outputs,
    encode_infer,
    error_body,
    error_headers,
    json_bytes,
    model_metadata,
    parse_infer,
)
from deepedge.dataplane.routes import model_route
from deepedge.dataplane.routing import RouteKind, choose
from deepedge.dataplane.sample_store import LATENCY_BUCKETS_MS, Sample, TrafficRow, bucket_of
from deepedge.dataplane.served_graph import GraphSession
from deepedge.dataplane.serving_table import ModelRoute

log = logging.getLogger(__name__)

PLATFORM = "onnxruntime_onnx"
JSON = "application/json"


class Request(Protocol):
    """What a transport hands over: starlette's ``Request`` is one (``url.path``, the
    method, ``headers.get``, ``await body()``)."""

    @property
    def url(self) -> Any: ...

    @property
    def method(self) -> str: ...

    @property
    def headers(self) -> Any: ...

    async def body(self) -> bytes: ...


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str | None = JSON


def refusal_reply(exc: DeepEdgeError) -> Reply:
    """A refused request's answer in the protocol's error form (its ``Allow`` or
    ``Retry-After`` included)."""
    return Reply(exc.http_status, error_body(exc.message), dict(error_headers(exc) or {}))


@dataclass
class Loaded:
    """A loaded version: its session, the file digest it came from and its threads."""

    module: GraphSession
    digest: str
    threads: int


@dataclass
class ModelState:
    """The served model in this replica (module docstring)."""

    route: ModelRoute | None = None
    keys: dict[str, KeyGrant] = field(default_factory=dict)
    loaded: dict[int, Loaded] = field(default_factory=dict)
    threads: int = 1


@dataclass
class TrafficCounter:
    """This replica's requests for one deployment in one wall-clock second."""

    requests: int = 0
    canary: int = 0
    pinned: int = 0
    failed: int = 0
    images: int = 0
    latency_ms_sum: float = 0.0
    failed_ms_sum: float = 0.0
    hist: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))


RunBatch = Callable[[tuple[int, np.ndarray, GraphSession]], Awaitable[np.ndarray]]
StoreSamples = Callable[[tuple[ModelRoute, list[Sample]]], Awaitable[bool]]
Feedback = Callable[[str, Sequence[Any]], Awaitable[list[str]]]  # -> the unknown ids
Totals = Callable[[str], Awaitable[TrafficTotals]]
Loader = Callable[[ModelRoute, int, int], GraphSession]  # route, version, threads


class InferenceHandler:
    """One served model's requests (module docstring); the transport supplies the batch
    runner, the sample writer, the feedback writer, the traffic totals, the loader and
    the re-read of the live keys (``check``; none: refused on the table held)."""

    def __init__(
        self, model: str, identity: Callable[[], dict[str, Any]], run_batch: RunBatch,
        store_samples: StoreSamples, feedback: Feedback, totals: Totals, loader: Loader,
        rng: random.Random | None = None, check: KeyCheck | None = None,
    ) -> None:  # fmt: skip
        self.model = model
        self.prefix = f"/v2/models/{model}"
        self.state = ModelState()
        self._identity = identity
        self._run_batch = run_batch
        self._store_samples = store_samples
        self._feedback = feedback
        self._totals = totals
        self._loader = loader
        self._rng = rng or random.Random(uuid.uuid4().int)
        self.check = check or KeyCheck(None)
        self._traffic: dict[tuple[str, int], TrafficCounter] = {}  # (deployment, second)

    # -- the table --------------------------------------------------------------------------

    def loads(self, route: ModelRoute | None) -> dict[int, Loaded]:
        """Every version ``route`` serves, loaded with the route's threads (what is loaded
        already with them is kept; blocking: off the event loop)."""
        if route is None:
            return dict(self.state.loaded)
        threads = route.threads
        fresh = dict(self.state.loaded)
        for number in route.versions.loaded():
            have = fresh.get(number)
            digest = route.digests[number]
            if have is None or have.digest != digest or have.threads != threads:
                fresh[number] = Loaded(self._loader(route, number, threads), digest, threads)
        return fresh

    def swap(self, route: ModelRoute | None, keys: dict[str, KeyGrant],
             fresh: dict[int, Loaded]) -> None:  # fmt: skip
        """The route, keys and loaded versions together (module docstring)."""
        if route is not None:
            keep = set(route.versions.loaded())
            fresh = {n: m for n, m in fresh.items() if n in keep}
        threads = route.threads if route is not None else self.state.threads
        self.state = ModelState(route, keys, fresh, threads)

    def healthy(self) -> bool:
        route = self.state.route
        return route is None or route.versions.serving in self.state.loaded

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, request: Request) -> Reply:
        started = time.perf_counter()
        route = self.state.route
        kind: RouteKind | None = None
        images = 0
        try:
            suffix = request.url.path[len(self.prefix) :].rstrip("/")
            await self.check.authorize(self.state.keys, request.headers.get("authorization"),
                                       route.deployment_id if route else None,
                                       route.tenant_id if route else None)  # fmt: skip
            assert route is not None
            asked = model_route(suffix, request.method)
            if asked.action == "infer":
                reply, kind, images = await self._infer(request, route, asked.pinned)
            elif asked.action == "feedback":
                reply = await self._feedback_reply(request, route)
            elif asked.action == "":
                reply = self._metadata(route, asked.pinned)
            elif asked.action == "ready":
                reply = self._ready(route, asked.pinned)
            elif asked.action == "config":
                reply = self._config(route, asked.pinned)
            else:
                totals = await self._totals(route.deployment_id)
                reply = Reply(200, json_bytes(model_statistics(self.model, totals)))
        except DeepEdgeError as exc:
            reply = refusal_reply(exc)
        except Exception as exc:  # never a traceback to the client
            log.exception("request to %s failed", self.model)
            reply = Reply(500, error_body(f"internal error: {exc}"))
        if route is not None and kind is not None:
            self.count(route.deployment_id, kind, images, reply.status >= 500,
                       (time.perf_counter() - started) * 1000)  # fmt: skip
        return reply

    async def _infer(
        self, request: Request, route: ModelRoute, pinned: int | None
    ) -> tuple[Reply, RouteKind, int]:
        body = await bounded_body(request, body_limit(route.signature, route.shape.max_batch_size))
        header = request.headers.get(HEADER_LENGTH)
        try:
            header_length = int(header) if header is not None else None
        except ValueError as exc:
            raise BadRequestError(f"Inference-Header-Content-Length {header!r}") from exc
        parsed = parse_infer(body, header_length, route.signature, route.shape.max_batch_size)
        # the table may have changed while the body came: choose from the current one,
        # and hold the chosen session (a swap may drop its version before the batch runs)
        now_route = self.state.route or route
        version, kind = choose(now_route.versions, self._rng.random(), pinned)
        held = self.state.loaded.get(version)
        if held is None:
            raise NotFoundError(f"version {version} of {self.model} is not loaded here")
        images = np.asarray(parsed.inputs[route.signature.inputs[0].name], dtype=np.float32)
        logits = await self._run_batch((version, images, held.module))
        check_finite_outputs({"logits": logits}, str(version))
        labels = logits.argmax(axis=1).astype(np.int64)
        request_id = uuid.uuid4().hex
        wants = parsed.parameters.get("sample")
        sample = (
            kind is not RouteKind.PINNED and self._rng.random() < route.sample_fraction
            if wants is None
            else wants is True
        )
        sampled = False
        if sample:
            now = time.time()
            batch = [
                Sample(item_id(request_id, i, len(images)), now, version, kind,
                       int(labels[i]), images[i],
                       None if parsed.id is None else item_id(parsed.id, i, len(images)))
                for i in range(len(images))
            ]  # fmt: skip
            sampled = await self._store_samples((route, batch))
        body_out, header_len = encode_infer(
            self.model, str(version), parsed.id or request_id,
            {"logits": logits, "label": labels}, parsed.outputs,
            {"request_id": request_id, "sampled": sampled, "route": kind.value,
             **self._identity()},
        )  # fmt: skip
        if header_len is None:
            return Reply(200, body_out), kind, len(images)
        headers = {HEADER_LENGTH: str(header_len)}
        return Reply(200, body_out, headers, "application/octet-stream"), kind, len(images)

    async def _feedback_reply(self, request: Request, route: ModelRoute) -> Reply:
        body = await bounded_body(request, body_limit(route.signature, 1))
        labels = parse_feedback(body, route.class_names)
        unknown = await self._feedback(route.deployment_id, labels)
        if unknown:
            raise unknown_error(unknown)
        return Reply(200, json_bytes({"labelled": len(labels)}))

    def _metadata(self, route: ModelRoute, pinned: int | None) -> Reply:
        versions = [str(n) for n in route.versions.loaded()]
        if pinned is not None:
            choose(route.versions, 0.0, pinned)  # NotFoundError for a version not served
            versions = [str(pinned)]
        document = model_metadata(self.model, versions, route.signature, PLATFORM)
        document["parameters"] = {
            "serving_version": route.versions.serving,
            "canary_version": route.versions.canary,
            "canary_share": route.versions.canary_share if route.versions.canary else 0.0,
            "class_names": list(route.class_names),
            **self._identity(),
        }
        return Reply(200, json_bytes(document))

    def _ready(self, route: ModelRoute, pinned: int | None) -> Reply:
        number = route.versions.serving if pinned is None else pinned
        if number not in self.state.loaded:
            raise NotFoundError(f"version {number} of {self.model} is not ready")
        return Reply(200, json_bytes(model_ready_document(self.model)))

    def _config(self, route: ModelRoute, pinned: int | None) -> Reply:
        versions = list(route.versions.loaded())
        if pinned is not None:
            choose(route.versions, 0.0, pinned)  # NotFoundError for a version not served
            versions = [pinned]
        shape = route.shape
        document = model_config(self.model, PLATFORM, route.signature, shape.max_batch_size,
                                shape.batch_wait_ms, shape.replicas, shape.gpus,
                                versions)  # fmt: skip
        return Reply(200, json_bytes(document))

    # -- traffic ----------------------------------------------------------------------------

    def count(self, deployment: str, kind: RouteKind, images: int, failed: bool,
              latency_ms: float) -> None:  # fmt: skip
        key = (deployment, int(time.time()))
        counter = self._traffic.get(key)
        if counter is None:
            counter = self._traffic[key] = TrafficCounter()
        counter.requests += 1
        counter.canary += kind is RouteKind.CANARY
        counter.pinned += kind is RouteKind.PINNED
        counter.failed += failed
        counter.images += images
        counter.latency_ms_sum += latency_ms
        counter.failed_ms_sum += latency_ms if failed else 0.0
        counter.hist[bucket_of(latency_ms)] += 1

    def finished_seconds(self, replica: str, now: float) -> list[TrafficRow]:
        """The counters of the seconds before ``now``, taken out as rows."""
        done = [key for key in self._traffic if key[1] < int(now)]
        return [
            TrafficRow(deployment, second, replica, c.requests, c.canary, c.pinned, c.failed,
                       c.images, c.latency_ms_sum, tuple(c.hist), c.failed_ms_sum)
            for deployment, second in done
            for c in (self._traffic.pop((deployment, second)),)
        ]  # fmt: skip


def item_id(base: str, index: int, batch: int) -> str:
    """A batch item's id: the request's for a batch of one, else ``<id>-<index>``."""
    return base if batch == 1 else f"{base}-{index}"


async def bounded_body(request: Request, limit_bytes: int) -> bytes:
    """The request's body, inflated when it comes compressed, refused (413) past
    ``limit_bytes`` as sent or as inflated."""
    length = request.headers.get("content-length")
    check_body_size(int(length) if length and length.isdigit() else None, limit_bytes)
    body = await request.body()
    check_body_size(len(body), limit_bytes)
    return decode_body(body, request.headers.get("content-encoding"), limit_bytes)
