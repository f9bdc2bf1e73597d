"""What the isolation bench counts as telling bob that alice's model exists: an answer to
her model's route that differs from the same route of a model nothing serves (status, body,
headers but the per-request ones), or one that names her model or deployment."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import httpx
import pytest

from deepedge.bench.harness.http import InferenceKey
from deepedge.bench.isolation_host import serve_routes
from deepedge.bench.isolation_served import (
    ALICE_DEPLOYMENT,
    MODEL_PATHS,
    UNSERVED_MODEL,
    Served,
    existence_leaks,
    fingerprint,
    names_leaked,
)

MODEL = f"alice.{ALICE_DEPLOYMENT}"
BOB_KEY = "dpk_bob"
CALLERS = {"no key": {}, "bob's key": {"Authorization": f"Bearer {BOB_KEY}"}}
_ids = itertools.count()


def _served(ready: int = 200, infer: int = 200) -> Served:
    key = InferenceKey(f"http://dp/v2/models/{MODEL}", MODEL, "dpk_alice")
    return Served(ALICE_DEPLOYMENT, key, ready, infer, b"{}", {"Content-Type": "x"})


def _refusal(request: httpx.Request) -> httpx.Response:
    """The front's answer for a model nothing serves: 401 without a live key, else 404;
    a fresh request id each time."""
    headers = {"x-request-id": str(next(_ids))}
    if request.headers.get("authorization") != f"Bearer {BOB_KEY}":
        return httpx.Response(401, json={"error": "an inference key is needed"}, headers=headers)
    return httpx.Response(404, json={"error": "unknown model"}, headers=headers)


def _site(hers: Callable[[httpx.Request], httpx.Response | None]) -> httpx.Client:
    """A data plane whose answers to alice's model are ``hers`` (None: as the front's)."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith(f"/v2/models/{MODEL}"):
            return hers(request) or _refusal(request)
        return _refusal(request)

    return httpx.Client(base_url="http://dp", transport=httpx.MockTransport(answer))


def _ready_to_bob(request: httpx.Request) -> httpx.Response | None:
    return httpx.Response(200, json={"ready": True}) if request.url.path.endswith("/ready") \
        else None  # fmt: skip


def _header_names_her(request: httpx.Request) -> httpx.Response | None:
    refused = _refusal(request)
    refused.headers["x-served-by"] = f"model-{MODEL}"
    return refused


def _body_names_her(request: httpx.Request) -> httpx.Response | None:
    if request.method == "POST":
        return httpx.Response(404, json={"error": f"unknown model {MODEL}"})
    return None


def _retry_after(request: httpx.Request) -> httpx.Response | None:
    refused = _refusal(request)
    refused.headers["retry-after"] = "1"  # a starting model's hint: another status of hers
    return refused


@pytest.mark.parametrize(
    ("hers", "leaked"),
    [
        (lambda r: None, 0),  # answered exactly as a model nothing serves
        (_ready_to_bob, 2 * len(CALLERS)),  # /ready and /versions/1/ready, to each caller
        (_header_names_her, len(MODEL_PATHS) * len(CALLERS)),
        (_body_names_her, 2 * len(CALLERS)),  # the two infer routes
        (_retry_after, len(MODEL_PATHS) * len(CALLERS)),
    ],
)  # fmt: skip
def test_a_route_of_alice_that_answers_otherwise_than_no_model_is_a_leak(
    hers: Callable[[httpx.Request], httpx.Response | None], leaked: int
) -> None:
    with _site(hers) as client:
        leaks, compared = existence_leaks(client, _served(), CALLERS)
    assert compared == len(MODEL_PATHS) * len(CALLERS)
    assert len(leaks) == leaked, leaks


def test_the_request_id_is_not_a_difference_but_any_other_header_is() -> None:
    first = httpx.Response(404, json={"error": "unknown model"}, headers={"X-Request-Id": "1"})
    again = httpx.Response(404, json={"error": "unknown model"}, headers={"x-request-id": "2"})
    assert fingerprint(first) == fingerprint(again)
    again.headers["server"] = "replica"
    assert fingerprint(first) != fingerprint(again)


@pytest.mark.parametrize(
    ("body", "headers", "named"),
    [
        ('{"error":"unknown path"}', {}, []),
        (f'{{"/v2/models/{MODEL}":"model-{MODEL}"}}', {}, [MODEL, ALICE_DEPLOYMENT]),
        ("{}", {"x-app": ALICE_DEPLOYMENT}, [ALICE_DEPLOYMENT]),
        (f'{{"error":"unknown model {UNSERVED_MODEL}"}}', {}, []),
    ],
)  # fmt: skip
def test_names_are_found_in_the_body_and_the_headers(
    body: str, headers: dict[str, str], named: list[str]
) -> None:
    answer = httpx.Response(404, text=body, headers=headers)
    assert names_leaked(answer, (MODEL, ALICE_DEPLOYMENT)) == named


def test_alice_answers_only_with_both_her_ready_and_infer_at_200() -> None:
    assert _served().answering
    assert not _served(ready=503).answering and not _served(infer=404).answering
    assert MODEL in _served().evidence() and "infer 200" in _served().evidence()


def test_serves_own_routes_are_probed_under_alices_model_prefix() -> None:
    routes = serve_routes(MODEL)
    assert "/-/routes" in routes and f"/v2/models/{MODEL}/-/healthz" in routes
    assert all(MODEL not in r for r in serve_routes("x.y"))
