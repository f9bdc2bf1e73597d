"""A replica's table swap against requests already under way, without a cluster.

A rollback drops the version it replaces from the replica. A request that chose that
version before the swap, or whose body was still arriving when the swap came, must still
be answered (in a loaded site run, six such requests got a 500 at a rollback). And Ekya's
thread share must reach the sessions that run the forward passes: a version is loaded
again with the new threads when the share changes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from deepedge.dataplane.camera import infer_body
from deepedge.dataplane.keys import KeyGrant, key_digest
from deepedge.dataplane.protocol import classifier_signature
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.serving_table import InferenceShare, ModelRoute, ReplicaShape
from deepedge.runtime.model_server import Forwarded, ModelServer

KEY = "dpk_test-key"


class Constant:
    """A stand-in session: every image gets label ``label``."""

    def __init__(self, label: int, threads: int = 1) -> None:
        self.label, self.threads = label, threads

    def run(self, batch: np.ndarray) -> np.ndarray:
        logits = np.zeros((len(batch), 2), np.float32)
        logits[:, self.label] = 1.0
        return logits


def route(serving: int, previous: int | None = None, share: float | None = None) -> ModelRoute:
    versions = Versions(serving, previous=previous)
    return ModelRoute("t.cam", "d", "t", classifier_signature((1, 4, 4), 2), ("a", "b"),
                      versions, {n: f"v{n}.ts" for n in versions.loaded()},
                      {n: str(n) for n in versions.loaded()}, ReplicaShape(cpus=1.0),
                      sample_fraction=0.0,
                      share=InferenceShare(share) if share is not None else None)  # fmt: skip


class Unbatched:
    """``serve.batch`` needs a Serve replica: the replica's own batch body, one request a
    batch."""

    def __init__(self, replica: Any) -> None:
        self.replica = replica

    async def __call__(self, item: tuple[int, np.ndarray, Any]) -> np.ndarray:
        body: Any = ModelServer._run_batch.__wrapped__  # type: ignore[attr-defined]
        out: list[np.ndarray] = await body(self.replica, [item])
        return out[0]

    def set_max_batch_size(self, size: int) -> None:
        pass

    def set_batch_wait_timeout_s(self, seconds: float) -> None:
        pass


def server(first: ModelRoute) -> Any:
    """A ModelServer with its first table, its versions' modules given, no Ray or Serve."""
    s: Any = object.__new__(ModelServer)
    s._run_batch = Unbatched(s)
    s.model, s._group, s._node, s._ray_node = "t.cam", None, "n1", "ray-n1"
    s.prefix = "/v2/models/t.cam"
    s._pool = ThreadPoolExecutor(1)
    s._rng = random.Random(0)
    s._traffic, s._tasks = {}, [object()]  # no background tasks
    s._threads, s._gpu = 1, False
    s._loaded = {}
    s._load = lambda r, number, threads: Constant(number - 1, threads)  # v1 "a", v2 "b"
    s._apply(first, {key_digest(KEY): KeyGrant("d", "t")})
    return s


class SlowBody(Forwarded):
    """A request whose body arrives only after ``during`` ran (a swap, say)."""

    during: Any = None

    async def body(self) -> bytes:
        if self.during is not None:
            await self.during()
        return self.content


def request(during: Any = None) -> Any:
    body, headers = infer_body(np.zeros((1, 4, 4), dtype=np.float32))
    items = (*headers.items(), ("authorization", f"Bearer {KEY}"))
    r = SlowBody("/v2/models/t.cam/infer", "POST", items, body)
    object.__setattr__(r, "during", during)
    return r


def answer(response: Any) -> dict[str, Any]:
    length = int(dict(response.headers.items()).get("inference-header-content-length", 0))
    raw = bytes(response.body)
    document: dict[str, Any] = json.loads(raw[:length] if length else raw)
    return document


def test_a_request_whose_body_spans_a_rollback_is_answered_by_the_version_now_served() -> None:
    s = server(route(2, previous=1))
    rollback = route(1)  # v2 rolled back: v1 serves, v2 is dropped

    async def swap() -> None:
        s._swap(rollback, s._keys, s._loads(rollback))

    async def go() -> Any:
        return await s(request(during=swap))

    response = asyncio.run(go())
    assert response.status_code == 200, bytes(response.body)
    assert answer(response)["model_version"] == "1"
    assert set(s._loaded) == {1}


def test_a_request_that_chose_a_version_finishes_on_it_after_the_swap_drops_it() -> None:
    s = server(route(2, previous=1))
    rollback = route(1)

    async def go() -> list[Any]:
        held = s._loaded[2].module
        image = np.zeros((1, 1, 4, 4), dtype=np.float32)
        waiting = asyncio.ensure_future(s._run_batch((2, image, held)))
        s._swap(rollback, s._keys, s._loads(rollback))  # before the batch runs
        assert 2 not in s._loaded
        out: list[Any] = await waiting
        return out

    logits = asyncio.run(go())
    assert int(np.argmax(logits[0])) == 1  # v2's own answer, though v2 is gone


def test_ekyas_share_reaches_the_sessions_and_is_reported() -> None:
    s = server(route(1, share=3.0))
    assert s._loaded[1].module.threads == 3
    assert s.identity()["threads"] == 3 and s.identity()["share"] == 3.0
    s._apply(route(1, share=1.0), s._keys)
    assert s._loaded[1].module.threads == 1
    assert s.identity()["threads"] == 1


def test_a_replica_loads_the_checked_graph_with_the_routes_threads(tmp_path: Any) -> None:
    from deepedge.learning.export import export_onnx
    from deepedge.learning.models import make_edge_model

    path = tmp_path / "v1.serve.onnx"
    path.write_bytes(export_onnx(make_edge_model(2, 8, 4).eval(), torch.rand(2, 1, 8, 8)))
    s: Any = object.__new__(ModelServer)
    s._gpu = False
    table = route(1, share=2.0)
    table = dataclasses.replace(table, signature=classifier_signature((1, 8, 8), 2),
                                artifacts={1: str(path)})  # fmt: skip
    session = ModelServer._load(s, table, 1, table.threads)
    assert session.threads == 2
    assert session.run(np.zeros((3, 1, 8, 8), np.float32)).shape == (3, 2)
