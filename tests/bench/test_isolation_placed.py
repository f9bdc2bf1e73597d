"""What the isolation bench counts as a placed model's router telling bob that alice's model
is served: an answer other than the made-up name's (the router's group headers on a
refusal), her name in it, or an answer that came seconds later (a router waiting for a
group that never answers)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import httpx
import pytest

from deepedge.bench import isolation_placed
from deepedge.bench.isolation_placed import (
    PENDING,
    PLACED,
    Tell,
    compare,
    placed_spec,
    requests_as,
)
from deepedge.bench.isolation_served import MODEL_PATHS
from deepedge.controlplane.deployment_spec import DeploymentSpec

MODEL = f"alice.{PLACED}"
CALLERS = {"no key": {}, "bob's key": {"Authorization": "Bearer dpk_bob"}}
_ids = itertools.count()


def _refusal(request: httpx.Request) -> httpx.Response:
    headers = {"x-request-id": str(next(_ids))}
    if "authorization" not in request.headers:
        return httpx.Response(401, json={"error": "an inference key is needed"}, headers=headers)
    return httpx.Response(404, json={"error": "unknown model"}, headers=headers)


def _site(hers: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith(f"/v2/models/{MODEL}"):
            return hers(request)
        return _refusal(request)

    return httpx.Client(base_url="http://dp", transport=httpx.MockTransport(answer))


def _group_headers(request: httpx.Request) -> httpx.Response:
    refused = _refusal(request)
    refused.headers.update({"deepedge-group": "b1@head", "deepedge-fallback": "0"})
    return refused


def _late(request: httpx.Request) -> httpx.Response:
    time.sleep(0.3)  # the router's wait for a group with no replica (seconds, shortened)
    return _refusal(request)


def _names_her(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"error": f"no replica group of {MODEL} answered"})


@pytest.mark.parametrize(
    ("hers", "told"),
    [
        (_refusal, {}),
        (_group_headers, {Tell.ANSWER: len(MODEL_PATHS) * len(CALLERS)}),
        (_late, {Tell.TIME: len(MODEL_PATHS) * len(CALLERS)}),
        (_names_her, {Tell.ANSWER: len(MODEL_PATHS) * len(CALLERS),
                      Tell.NAME: len(MODEL_PATHS) * len(CALLERS)}),
    ],
)  # fmt: skip
def test_bobs_answers_from_a_placed_model_are_held_to_the_made_up_names(
    hers: Callable[[httpx.Request], httpx.Response],
    told: dict[Tell, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation_placed, "TELL_APART_S", 0.15)
    asked = requests_as(CALLERS, b"{}", {"Content-Type": "application/json"})
    with _site(hers) as client:
        found = compare(client, MODEL, (MODEL, PLACED), asked)
    assert found.compared == len(MODEL_PATHS) * len(CALLERS)
    assert {way: found.apart(way) for way in Tell if found.apart(way)} == told
    assert (found.gap_s > 0.15) == (Tell.TIME in told)


@pytest.mark.parametrize(("name", "node"), [(PLACED, "head"), (PENDING, "far")])
def test_each_deployment_is_placed_on_its_one_node(name: str, node: str) -> None:
    spec = DeploymentSpec.model_validate(placed_spec(name))
    assert spec.placement is not None
    assert [n["id"] for n in spec.placement["edge_nodes"]] == [node]
