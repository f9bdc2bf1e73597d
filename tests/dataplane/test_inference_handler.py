"""A served model's requests without Ray or Serve: the handler the replica adapts.

A rollback drops the version it replaces. A request that chose that version before the
swap, or whose body was still arriving when the swap came, must still be answered (in a
loaded site run, six such requests got a 500 at a rollback). Ekya's thread share must
reach the sessions that run the forward passes. And a whole request, from its body to its
sample and its traffic figures, runs on a real checked graph.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deepedge.dataplane.camera import infer_body
from deepedge.dataplane.inference import InferenceHandler, Reply
from deepedge.dataplane.keys import KeyGrant, key_digest
from deepedge.dataplane.protocol import classifier_signature
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.sample_store import Sample
from deepedge.dataplane.served_graph import GraphSession
from deepedge.dataplane.serving_table import InferenceShare, ModelRoute, ReplicaShape
from deepedge.learning.export import export_onnx
from deepedge.learning.models import make_edge_model

KEY = "dpk_test-key"


class Constant:
    """A stand-in session: every image gets label ``label``."""

    def __init__(self, label: int, threads: int = 1) -> None:
        self.label, self.threads = label, threads

    def run(self, batch: np.ndarray) -> np.ndarray:
        logits = np.zeros((len(batch), 2), np.float32)
        logits[:, self.label] = 1.0
        return logits


def route(serving: int, previous: int | None = None, share: float | None = None,
          sample_fraction: float = 0.0) -> ModelRoute:  # fmt: skip
    versions = Versions(serving, previous=previous)
    return ModelRoute("t.cam", "d", "t", classifier_signature((1, 4, 4), 2), ("a", "b"),
                      versions, {n: f"v{n}.onnx" for n in versions.loaded()},
                      {n: str(n) for n in versions.loaded()}, ReplicaShape(cpus=1.0),
                      sample_fraction=sample_fraction,
                      share=InferenceShare(share) if share is not None else None)  # fmt: skip


@dataclass
class Site:
    """What the transport gives the handler: an unbatched forward, a sample writer."""

    samples: list[Sample] = dataclasses.field(default_factory=list)

    async def run_batch(self, item: tuple[int, np.ndarray, Any]) -> np.ndarray:
        out: np.ndarray = item[2].run(item[1])
        return out

    async def store(self, item: tuple[ModelRoute, list[Sample]]) -> bool:
        self.samples.extend(item[1])
        return True

    async def feedback(self, deployment: str, labels: Any) -> list[str]:
        return []

    async def totals(self, deployment: str) -> Any:
        raise AssertionError("not asked")


def handler(first: ModelRoute, site: Site | None = None, loader: Any = None) -> InferenceHandler:
    site = site or Site()
    h = InferenceHandler("t.cam", lambda: {"threads": 1}, site.run_batch, site.store,
                         site.feedback, site.totals,
                         loader or (lambda r, number, threads: Constant(number - 1, threads)),
                         random.Random(0))  # fmt: skip
    h.swap(first, {key_digest(KEY): KeyGrant("d", "t")}, h.loads(first))
    return h


@dataclass(frozen=True)
class _Url:
    path: str


@dataclass
class Call:
    """A request as a transport hands it over; ``during`` runs while its body arrives."""

    body_bytes: bytes
    headers: dict[str, str]
    path: str = "/v2/models/t.cam/infer"
    method: str = "POST"
    during: Any = None

    @property
    def url(self) -> _Url:
        return _Url(self.path)

    async def body(self) -> bytes:
        if self.during is not None:
            await self.during()
        return self.body_bytes


def request(during: Any = None, key: str = KEY) -> Call:
    body, headers = infer_body(np.zeros((1, 4, 4), dtype=np.float32))
    return Call(body, {**{k.lower(): v for k, v in headers.items()},
                       "authorization": f"Bearer {key}"}, during=during)  # fmt: skip


def answer(reply: Reply) -> dict[str, Any]:
    length = int(reply.headers.get("Inference-Header-Content-Length", 0))
    document: dict[str, Any] = json.loads(reply.body[:length] if length else reply.body)
    return document


def test_a_request_whose_body_spans_a_rollback_is_answered_by_the_version_now_served() -> None:
    h = handler(route(2, previous=1))
    rollback = route(1)  # v2 rolled back: v1 serves, v2 is dropped

    async def swap() -> None:
        h.swap(rollback, h.state.keys, h.loads(rollback))

    reply = asyncio.run(h.handle(request(during=swap)))
    assert reply.status == 200, reply.body
    assert answer(reply)["model_version"] == "1"
    assert set(h.state.loaded) == {1}


def test_a_request_that_chose_a_version_finishes_on_it_after_the_swap_drops_it() -> None:
    release = asyncio.Event()
    site = Site()

    async def slow_batch(item: tuple[int, np.ndarray, Any]) -> np.ndarray:
        await release.wait()  # the batch runs only after the swap
        return await site.run_batch(item)

    h = handler(route(2, previous=1), site)
    h._run_batch = slow_batch  # (the transport's batch, held back)

    async def go() -> Reply:
        waiting = asyncio.ensure_future(h.handle(request()))
        await asyncio.sleep(0)
        h.swap(route(1), h.state.keys, h.loads(route(1)))  # before the batch runs
        assert 2 not in h.state.loaded
        release.set()
        return await waiting

    reply = asyncio.run(go())
    assert reply.status == 200 and answer(reply)["model_version"] == "2"  # v2's own answer


def test_ekyas_share_reaches_the_sessions() -> None:
    h = handler(route(1, share=3.0))
    assert h.state.loaded[1].module.threads == 3 and h.state.threads == 3
    h.swap(route(1, share=1.0), h.state.keys, h.loads(route(1, share=1.0)))
    assert h.state.loaded[1].module.threads == 1 and h.state.threads == 1


def test_a_whole_request_on_a_checked_graph_sampled_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "v1.serve.onnx"
    model = make_edge_model(2, 8, 4).eval()
    path.write_bytes(export_onnx(model, torch.rand(2, 1, 8, 8)))
    table = dataclasses.replace(route(1, sample_fraction=1.0),
                                signature=classifier_signature((1, 8, 8), 2),
                                artifacts={1: str(path)})  # fmt: skip
    site = Site()
    h = handler(table, site, lambda r, number, threads: GraphSession.load(
        r.artifacts[number], (1, 8, 8), 2, threads))  # fmt: skip
    image = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    body, headers = infer_body(image[0])  # (one image a request, as a camera sends)
    call = Call(body, {**{k.lower(): v for k, v in headers.items()},
                       "authorization": f"Bearer {KEY}"})  # fmt: skip
    reply = asyncio.run(h.handle(call))
    assert reply.status == 200
    document = answer(reply)
    with torch.no_grad():
        expected = int(model(torch.from_numpy(image)).argmax())
    labels = next(o for o in document["outputs"] if o["name"] == "label")
    assert labels["data"] == [expected] and document["parameters"]["sampled"] is True
    assert [s.prediction for s in site.samples] == [expected]
    refused = asyncio.run(h.handle(dataclasses.replace(call, headers={
        **call.headers, "authorization": "Bearer dpk_wrong"})))  # fmt: skip
    assert refused.status == 401
    rows = h.finished_seconds("replica-1", now=2e10)
    assert sum(r.requests for r in rows) == 1 and sum(r.images for r in rows) == 1
