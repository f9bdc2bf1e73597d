"""A deployment's replica in Ray Serve: the Open Inference Protocol on its own route.

Each deployment is one Serve application whose ingress is :class:`ModelServer`, on the
route ``/v2/models/<model>``, so a request makes one hop: Serve's HTTP proxy, then this
replica, which parses the request (:mod:`deepedge.dataplane.protocol`), checks the key
(:mod:`deepedge.dataplane.keys`), chooses the version (:mod:`deepedge.dataplane.routing`),
runs it in a dynamic batch (``serve.batch``: up to ``max_batch_size`` images, or what came
within ``batch_wait_ms``; the forward pass runs off the event loop so the next batch is
parsed meanwhile), samples a share of the requests into the sample store through the
writer actor (batched too; a sample is acknowledged, ``sampled: true`` in the response,
only once it is committed) and answers with the version that served it.

The replica follows the data plane's serving table (:class:`DataPlaneController`, a long
poll): a changed table is applied by loading every new version in the background and only
then swapping the route, so a promotion or rollback under load fails no request; old
versions are dropped after the swap, and a request already under way finishes on the
session it chose. A version is its checked ONNX graph
(:mod:`deepedge.dataplane.served_graph`: allowed tensor operators, static shapes; checked
again here before it is loaded) run by ONNX Runtime: the replica never runs a tenant's
code. Its intra-op threads are the table's (Ekya's share on a CPU edge server): a session
is made again when they change. While the controller is away the replica serves its last
table.

A deployment with a placement is served by replica groups
(:mod:`deepedge.dataplane.replica_groups`): each group is a Serve deployment of
:class:`ModelServer` whose replicas are pinned to the group's node and batch at most the
variant's batch size, called by the deployment's
:class:`~deepedge.runtime.camera_router.CameraRouter` with :class:`Forwarded` requests.
Every answer names the replica that computed it: its variant, deepedge node, Ray node,
torch threads and GPU share (the OIP response's ``parameters``).

Routes under the prefix: ``GET ""`` (metadata), ``GET /ready``, ``GET /config``,
``GET /stats`` (:mod:`deepedge.dataplane.model_reports`), ``POST /infer``, the same under
``/versions/{v}`` (but ``/stats``), and ``POST /feedback``
(:mod:`deepedge.dataplane.feedback`: the application's ground truth for served requests,
named by the answer's ``request_id`` or the request's own ``id``; a batch is all or
nothing). A known route asked with another method is a 405 naming the methods it takes. A
request body may come compressed (``Content-Encoding: gzip`` or ``deflate``,
:mod:`deepedge.dataplane.content_encoding`), bounded inflated as uncompressed. An input
that is not finite is refused (400) and an answer that is not finite too (422), before
either is kept as a sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import ray
from ray import serve
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from deepedge.core.errors import (
    BadRequestError,
    DeepEdgeError,
    NotFoundError,
)
from deepedge.dataplane.batching import by_version, images_in, scatter
from deepedge.dataplane.content_encoding import decode_body
from deepedge.dataplane.feedback import parse_feedback, unknown_error
from deepedge.dataplane.keys import KeyGrant, authorize
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
from deepedge.dataplane.replica_groups import (
    ReplicaGroup,
)
from deepedge.dataplane.routes import model_route
from deepedge.dataplane.routing import RouteKind, choose
from deepedge.dataplane.sample_store import (
    FEEDBACK,
    LATENCY_BUCKETS_MS,
    Sample,
    TrafficRow,
    bucket_of,
)
from deepedge.dataplane.served_graph import GraphSession
from deepedge.dataplane.serving_table import ModelRoute
from deepedge.runtime.controller_poll import ControllerPoll

log = logging.getLogger(__name__)

PLATFORM = "onnxruntime_onnx"
JSON = "application/json"
POLL_WAIT_S = 10.0  # a long poll of the table returns at once on a change, else after this
SAMPLE_ACK_TIMEOUT_S = 5.0  # a sample not committed by then is answered as not sampled
TRAFFIC_FLUSH_S = 1.0


class _Url(NamedTuple):
    path: str


@dataclass(frozen=True)
class Forwarded:
    """An HTTP request as the router passes it to a group (picklable; read like starlette's
    ``Request``: ``url.path``, ``method``, ``headers``, ``await body()``)."""

    path: str
    method: str
    header_items: tuple[tuple[str, str], ...]
    content: bytes

    @property
    def url(self) -> _Url:
        return _Url(self.path)

    @property
    def headers(self) -> Headers:
        return Headers(headers=dict(self.header_items))

    async def body(self) -> bytes:
        return self.content


@dataclass(frozen=True)
class Answer:
    """A group's response as the router returns it."""

    status: int
    content: bytes
    header_items: tuple[tuple[str, str], ...]


HttpRequest = Request | Forwarded


@dataclass
class Loaded:
    """A loaded version: its session, the file digest it came from and its threads."""

    module: GraphSession
    digest: str
    threads: int


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


class ModelServer:
    """One replica of one deployment (module docstring)."""

    def __init__(
        self,
        model: str,
        controller: str,
        writer: str,
        namespace: str,
        group: ReplicaGroup | None = None,
        node: str | None = None,
    ) -> None:
        self.model = model
        self._group = group
        self._node = group.node if group is not None else node  # the deepedge node pinned to
        self._ray_node = ray.get_runtime_context().get_node_id()
        self.prefix = f"/v2/models/{model}"
        self._namespace = namespace
        self._writer_name = writer
        self._poll = ControllerPoll(controller, namespace,
                                    lambda c, held, wait_s: c.table_for.remote(model, held, wait_s),
                                    "serving table")  # fmt: skip
        self._writer = ray.get_actor(writer, namespace=namespace)
        self._route: ModelRoute | None = None
        self._keys: dict[str, KeyGrant] = {}
        self._loaded: dict[int, Loaded] = {}
        self._rng = random.Random(uuid.uuid4().int)
        self._gpu = bool(ray.get_gpu_ids())
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="forward")
        self._replica = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._traffic: dict[tuple[str, int], TrafficCounter] = {}  # (deployment, second)
        self._tasks: list[asyncio.Task[None]] = []
        self._threads = 1
        self._apply(*self._poll.first())

    # -- following the table --------------------------------------------------------------

    def _apply(self, route: ModelRoute | None, keys: dict[str, KeyGrant]) -> None:
        """Load what ``route`` needs and swap it in at once (blocking: the first table)."""
        self._swap(route, keys, self._loads(route))

    def _loads(self, route: ModelRoute | None) -> dict[int, Loaded]:
        """Every version ``route`` serves, loaded with the route's threads (what is loaded
        already with them is kept; blocking, off the event loop)."""
        if route is None:
            return dict(self._loaded)
        threads = route.threads
        fresh = dict(self._loaded)
        for number in route.versions.loaded():
            have = fresh.get(number)
            digest = route.digests[number]
            if have is None or have.digest != digest or have.threads != threads:
                fresh[number] = Loaded(self._load(route, number, threads), digest, threads)
        return fresh

    def _swap(self, route: ModelRoute | None, keys: dict[str, KeyGrant],
              fresh: dict[int, Loaded]) -> None:  # fmt: skip
        """The route and its loaded versions together (on the event loop, so a request
        sees both or neither). A request in flight holds the module it chose, so a version
        dropped here still answers what it took."""
        if route is not None:
            batcher: Any = self._run_batch
            group_batch = self._group.max_batch_size if self._group is not None else None
            batcher.set_max_batch_size(min(group_batch or route.shape.max_batch_size,
                                           route.shape.max_batch_size))  # fmt: skip
            batcher.set_batch_wait_timeout_s(route.shape.batch_wait_ms / 1000)
            keep = set(route.versions.loaded())
            fresh = {n: m for n, m in fresh.items() if n in keep}
        self._loaded, self._route, self._keys = fresh, route, keys
        if route is not None:
            self._threads = route.threads

    def _load(self, route: ModelRoute, number: int, threads: int) -> GraphSession:
        shape = tuple(int(d) for d in route.signature.inputs[0].shape[1:])
        session = GraphSession.load(route.artifacts[number], shape, route.classes, threads,
                                    self._gpu)  # fmt: skip
        session.run(np.zeros((1, *shape), dtype=np.float32))  # first-run set-up, not a request's
        return session

    async def _apply_next(self, route: ModelRoute | None, keys: dict[str, KeyGrant]) -> None:
        fresh = await asyncio.get_running_loop().run_in_executor(None, self._loads, route)
        self._swap(route, keys, fresh)

    async def _flush_traffic(self) -> None:
        while True:
            await asyncio.sleep(TRAFFIC_FLUSH_S)
            now = int(time.time())
            done = [key for key in self._traffic if key[1] < now]
            rows = [
                TrafficRow(deployment, second, self._replica, c.requests, c.canary, c.pinned,
                           c.failed, c.images, c.latency_ms_sum, tuple(c.hist), c.failed_ms_sum)
                for deployment, second in done
                for c in (self._traffic.pop((deployment, second)),)
            ]  # fmt: skip
            if rows:
                try:
                    await self._writer.record_traffic.remote(rows)
                except Exception as exc:  # figures only: never holds up serving
                    log.info("traffic figures not recorded (%s)", exc)

    def _start_background(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._poll.follow(self._apply_next, POLL_WAIT_S)),
                           asyncio.create_task(self._flush_traffic())]  # fmt: skip

    def identity(self) -> dict[str, Any]:
        """Which replica this is: its group's variant, its deepedge and Ray nodes, and the
        threads (as its forward thread runs) and GPU share it runs with."""
        route = self._route
        return {
            "variant": self._group.variant if self._group is not None else None,
            "node": self._node,
            "ray_node": self._ray_node,
            "threads": self._threads,
            "gpus": route.shape.gpus if route is not None else 0.0,
            "share": route.share.gpus if route is not None and route.share else None,
        }

    def check_health(self) -> None:
        if self._route is not None and self._route.versions.serving not in self._loaded:
            raise RuntimeError(f"{self.model}: the serving version is not loaded")

    # -- requests -------------------------------------------------------------------------

    async def forwarded(self, request: Forwarded) -> Answer:
        """A request the application's :class:`CameraRouter` sent to this group."""
        response = await self(request)
        return Answer(response.status_code, bytes(response.body),
                      tuple(response.headers.items()))  # fmt: skip

    async def __call__(self, request: HttpRequest) -> Response:
        self._start_background()
        started = time.perf_counter()
        route = self._route
        kind: RouteKind | None = None
        images = 0
        try:
            suffix = request.url.path[len(self.prefix) :].rstrip("/")
            authorize(self._keys, request.headers.get("authorization"),
                      route.deployment_id if route else None,
                      route.tenant_id if route else None)  # fmt: skip
            assert route is not None
            asked = model_route(suffix, request.method)
            pinned, action = asked.pinned, asked.action
            if action == "infer":
                response, kind, images = await self._infer(request, route, pinned)
            elif action == "feedback":
                response = await self._feedback(request, route)
            elif action == "":
                response = self._metadata(route, pinned)
            elif action == "ready":
                response = self._ready(route, pinned)
            elif action == "config":
                response = self._config(route, pinned)
            else:
                response = await self._stats(route)
        except DeepEdgeError as exc:
            response = Response(error_body(exc.message), exc.http_status,
                                headers=error_headers(exc), media_type=JSON)  # fmt: skip
        except Exception as exc:  # never a traceback to the client
            log.exception("request to %s failed", self.model)
            response = Response(error_body(f"internal error: {exc}"), 500, media_type=JSON)
        if route is not None and kind is not None:
            self._count(route.deployment_id, kind, images, response.status_code >= 500,
                        (time.perf_counter() - started) * 1000)  # fmt: skip
        return response

    def _count(
        self, deployment: str, kind: RouteKind, images: int, failed: bool, latency_ms: float
    ) -> None:
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

    async def _infer(
        self, request: HttpRequest, route: ModelRoute, pinned: int | None
    ) -> tuple[Response, RouteKind, int]:
        limit = body_limit(route.signature, route.shape.max_batch_size)
        body = await _bounded_body(request, limit)
        header = request.headers.get(HEADER_LENGTH)
        try:
            header_length = int(header) if header is not None else None
        except ValueError as exc:
            raise BadRequestError(f"Inference-Header-Content-Length {header!r}") from exc
        parsed = parse_infer(body, header_length, route.signature, route.shape.max_batch_size)
        # the table may have changed while the body came: choose from the current one,
        # and hold the chosen module (a swap may drop its version before the batch runs)
        version, kind = choose(self._route.versions if self._route else route.versions,
                               self._rng.random(), pinned)  # fmt: skip
        held = self._loaded.get(version)
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
                Sample(_item_id(request_id, i, len(images)), now, version, kind,
                       int(labels[i]), images[i],
                       None if parsed.id is None else _item_id(parsed.id, i, len(images)))
                for i in range(len(images))
            ]  # fmt: skip
            sampled = await self._store_samples((route, batch))
        body_out, header_len = encode_infer(
            self.model, str(version), parsed.id or request_id,
            {"logits": logits, "label": labels}, parsed.outputs,
            {"request_id": request_id, "sampled": sampled, "route": kind.value,
             **self.identity()},
        )  # fmt: skip
        headers = {HEADER_LENGTH: str(header_len)} if header_len is not None else None
        media = "application/octet-stream" if header_len is not None else JSON
        return Response(body_out, 200, headers=headers, media_type=media), kind, len(images)

    @serve.batch(
        max_batch_size=32,
        batch_wait_timeout_s=0.005,
        max_concurrent_batches=2,
        batch_size_fn=images_in,
    )
    async def _run_batch(self, items: list[tuple[int, np.ndarray, Any]]) -> list[np.ndarray]:
        """One dynamic batch: every version's requests run together, off the event loop,
        each on the module its requests hold."""
        loop = asyncio.get_running_loop()
        modules = {version: module for version, _, module in items}
        groups = by_version([(version, x) for version, x, _ in items])
        outputs = [await loop.run_in_executor(self._pool, self._forward, modules[g.version],
                                              g.inputs)
                   for g in groups]  # fmt: skip
        return scatter(groups, outputs, len(items))

    def _forward(self, module: GraphSession, batch: np.ndarray) -> np.ndarray:
        return module.run(batch)

    @serve.batch(max_batch_size=256, batch_wait_timeout_s=0.005)
    async def _store_samples(self, items: list[tuple[ModelRoute, list[Sample]]]) -> list[bool]:
        """Append the sampled requests of concurrent calls in one commit; True for each
        call whose samples are durable."""
        route = items[0][0]
        samples = [s for _, batch in items for s in batch]
        try:
            await asyncio.wait_for(
                self._writer.append.remote(route.deployment_id, samples, route.retention),
                SAMPLE_ACK_TIMEOUT_S,
            )
        except Exception as exc:  # the writer restarting: not acknowledged, still served
            log.info("%d samples not acknowledged (%s)", len(samples), exc)
            with contextlib.suppress(ValueError):
                self._writer = ray.get_actor(self._writer_name, self._namespace)
            return [False] * len(items)
        return [True] * len(items)

    async def _feedback(self, request: HttpRequest, route: ModelRoute) -> Response:
        body = await _bounded_body(request, body_limit(route.signature, 1))
        labels = parse_feedback(body, route.class_names)
        unknown = await self._writer.label_batch.remote(route.deployment_id, labels, FEEDBACK)
        if unknown:
            raise unknown_error(unknown)
        return Response(json_bytes({"labelled": len(labels)}), 200, media_type=JSON)

    def _metadata(self, route: ModelRoute, pinned: int | None) -> Response:
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
            **self.identity(),
        }
        return Response(json_bytes(document), 200, media_type=JSON)

    def _ready(self, route: ModelRoute, pinned: int | None) -> Response:
        number = route.versions.serving if pinned is None else pinned
        if number not in self._loaded:
            raise NotFoundError(f"version {number} of {self.model} is not ready")
        return Response(json_bytes(model_ready_document(self.model)), 200, media_type=JSON)

    def _config(self, route: ModelRoute, pinned: int | None) -> Response:
        versions = list(route.versions.loaded())
        if pinned is not None:
            choose(route.versions, 0.0, pinned)  # NotFoundError for a version not served
            versions = [pinned]
        shape = route.shape
        document = model_config(self.model, PLATFORM, route.signature, shape.max_batch_size,
                                shape.batch_wait_ms, shape.replicas, shape.gpus,
                                versions)  # fmt: skip
        return Response(json_bytes(document), 200, media_type=JSON)

    async def _stats(self, route: ModelRoute) -> Response:
        """The deployment's traffic as Triton's statistics (its figures as the writer holds
        them: this second's, not yet reported, are left out)."""
        totals: TrafficTotals = await self._writer.traffic_totals.remote(route.deployment_id)
        return Response(json_bytes(model_statistics(self.model, totals)), 200, media_type=JSON)


def _item_id(base: str, index: int, batch: int) -> str:
    """A batch item's id: the request's for a batch of one, else ``<id>-<index>``."""
    return base if batch == 1 else f"{base}-{index}"


async def _bounded_body(request: HttpRequest, limit_bytes: int) -> bytes:
    """The request's body, inflated when it comes compressed, refused (413) past
    ``limit_bytes`` as sent or as inflated."""
    length = request.headers.get("content-length")
    check_body_size(int(length) if length and length.isdigit() else None, limit_bytes)
    body = await request.body()
    check_body_size(len(body), limit_bytes)
    return decode_body(body, request.headers.get("content-encoding"), limit_bytes)
