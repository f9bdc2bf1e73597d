"""A deployment's replica in Ray Serve: the Open Inference Protocol on its own route.

Each deployment is one Serve application whose ingress is :class:`ModelServer`, on the
route ``/v2/models/<model>``, so a request makes one hop: Serve's HTTP proxy, then this
replica. What the replica does with a request is :mod:`deepedge.dataplane.inference`'s
(plain Python: route, key, body, tensors, version, the answer, samples, counts); this
class adapts it to Ray Serve: the dynamic batch (``serve.batch``: up to
``max_batch_size`` images, or what came within ``batch_wait_ms``; the forward pass on a
thread of its own so the next batch is parsed meanwhile), the sample writer actor
(batched too; a sample is acknowledged, ``sampled: true``, only once it is committed), the
per-second traffic figures flushed to it, and the serving table followed by a long poll of
the data plane's controller (:class:`DataPlaneController`): a changed table is loaded in
the background and then swapped in at once, so a promotion or rollback under load fails no
request; a key is refused only on the live keys the controller reads afresh
(:meth:`ControllerPoll.live_keys`). A version is its checked ONNX graph
(:mod:`deepedge.dataplane.served_graph`, checked again here before it is loaded) run by
ONNX Runtime with the table's threads (Ekya's share on a CPU edge server): the replica never
runs a tenant's code. While the
controller is away the replica serves its last table.

A deployment with a placement is served by replica groups
(:mod:`deepedge.dataplane.replica_groups`): each group is a Serve deployment of
:class:`ModelServer` whose replicas are pinned to the group's node and batch at most the
variant's batch size, called by the deployment's
:class:`~deepedge.runtime.serving.camera_router.CameraRouter` with :class:`Forwarded` requests.
Every answer names the replica that computed it: its variant, deepedge node, Ray node,
threads and GPU share (the OIP response's ``parameters``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import ray
from ray import serve
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from deepedge.dataplane.batching import by_version, images_in, scatter
from deepedge.dataplane.inference import InferenceHandler, Loaded, Reply
from deepedge.dataplane.keys import KeyCheck, KeyGrant
from deepedge.dataplane.model_reports import TrafficTotals
from deepedge.dataplane.replica_groups import ReplicaGroup
from deepedge.dataplane.sample_store import FEEDBACK, Sample
from deepedge.dataplane.served_graph import GraphSession
from deepedge.dataplane.serving_table import ModelRoute
from deepedge.runtime.serving.controller_poll import table_poll

log = logging.getLogger(__name__)

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


class ModelServer:
    """One replica of one deployment: Ray Serve's side of
    :class:`~deepedge.dataplane.inference.InferenceHandler` (module docstring)."""

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
        self._namespace = namespace
        self._writer_name = writer
        self._poll = table_poll(controller, namespace, model)
        self._writer = ray.get_actor(writer, namespace=namespace)
        self._gpu = bool(ray.get_gpu_ids())
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="forward")
        self._replica = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._tasks: list[asyncio.Task[None]] = []
        self.handler = InferenceHandler(
            model, self.identity, self._run_batch, self._store_samples, self._label_feedback,
            self._traffic_totals, self._load, check=KeyCheck(self._poll.live_keys),
        )  # fmt: skip
        self._apply(*self._poll.first())

    # -- following the table --------------------------------------------------------------

    def _apply(self, route: ModelRoute | None, keys: dict[str, KeyGrant]) -> None:
        """Load what ``route`` needs and swap it in at once (blocking: the first table)."""
        self._swap(route, keys, self.handler.loads(route))

    def _swap(self, route: ModelRoute | None, keys: dict[str, KeyGrant],
              fresh: dict[int, Loaded]) -> None:  # fmt: skip
        """The handler's swap (on the event loop), with the dynamic batch sized for it."""
        if route is not None:
            batcher: Any = self._run_batch
            group_batch = self._group.max_batch_size if self._group is not None else None
            batcher.set_max_batch_size(min(group_batch or route.shape.max_batch_size,
                                           route.shape.max_batch_size))  # fmt: skip
            batcher.set_batch_wait_timeout_s(route.shape.batch_wait_ms / 1000)
        self.handler.swap(route, keys, fresh)

    def _load(self, route: ModelRoute, number: int, threads: int) -> GraphSession:
        shape = tuple(int(d) for d in route.signature.inputs[0].shape[1:])
        session = GraphSession.load(route.artifacts[number], shape, route.classes, threads,
                                    self._gpu)  # fmt: skip
        session.run(np.zeros((1, *shape), dtype=np.float32))  # first-run set-up, not a request's
        return session

    async def _apply_next(self, route: ModelRoute | None, keys: dict[str, KeyGrant]) -> None:
        fresh = await asyncio.get_running_loop().run_in_executor(None, self.handler.loads, route)
        self._swap(route, keys, fresh)

    async def _flush_traffic(self) -> None:
        while True:
            await asyncio.sleep(TRAFFIC_FLUSH_S)
            rows = self.handler.finished_seconds(self._replica, time.time())
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
        threads its sessions run with and its GPU share."""
        route = self.handler.state.route
        return {
            "variant": self._group.variant if self._group is not None else None,
            "node": self._node,
            "ray_node": self._ray_node,
            "threads": self.handler.state.threads,
            "gpus": route.shape.gpus if route is not None else 0.0,
            "share": route.share.gpus if route is not None and route.share else None,
        }

    def check_health(self) -> None:
        if not self.handler.healthy():
            raise RuntimeError(f"{self.model}: the serving version is not loaded")

    # -- requests -------------------------------------------------------------------------

    async def forwarded(self, request: Forwarded) -> Answer:
        """A request the application's :class:`CameraRouter` sent to this group."""
        response = await self(request)
        return Answer(response.status_code, bytes(response.body),
                      tuple(response.headers.items()))  # fmt: skip

    async def __call__(self, request: HttpRequest) -> Response:
        self._start_background()
        reply: Reply = await self.handler.handle(request)
        return Response(reply.body, reply.status, headers=reply.headers or None,
                        media_type=reply.media_type)  # fmt: skip

    @serve.batch(
        max_batch_size=32,
        batch_wait_timeout_s=0.005,
        max_concurrent_batches=2,
        batch_size_fn=images_in,
    )
    async def _run_batch(self, items: list[tuple[int, np.ndarray, Any]]) -> list[np.ndarray]:
        """One dynamic batch: every version's requests run together, off the event loop,
        each on the session its requests hold."""
        loop = asyncio.get_running_loop()
        modules = {version: module for version, _, module in items}
        groups = by_version([(version, x) for version, x, _ in items])
        outputs = [await loop.run_in_executor(self._pool, modules[g.version].run, g.inputs)
                   for g in groups]  # fmt: skip
        return scatter(groups, outputs, len(items))

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

    async def _label_feedback(self, deployment_id: str, labels: Sequence[Any]) -> list[str]:
        unknown: list[str] = await self._writer.label_batch.remote(deployment_id, labels,
                                                                   FEEDBACK)  # fmt: skip
        return unknown

    async def _traffic_totals(self, deployment_id: str) -> TrafficTotals:
        """The deployment's traffic (as the writer holds it: this second's, not reported
        yet, left out)."""
        totals: TrafficTotals = await self._writer.traffic_totals.remote(deployment_id)
        return totals
