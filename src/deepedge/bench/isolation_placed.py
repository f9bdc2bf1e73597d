"""Alice's placed deployments, reached through their camera routers, for the routes probe
(:mod:`deepedge.bench.isolation_host`): what bob learns of a model served by replica groups.

A deployment with a placement is served by replica groups behind a camera router
(:mod:`deepedge.runtime.serving.camera_router`), which answers some requests itself (503:
no replica groups yet, or none of them answered). Alice deploys the digits twice, each with
an MVSP problem of one camera and one edge node (:func:`placement_problem`):

* ``alice-placed`` on ``head``, the data plane's own node (the embedded head's
  ``deepedge-node:head`` resource): its group starts, and her ``infer`` is answered 200
  with the router's ``deepedge-group`` header: *after the groups serve*;
* ``alice-pending`` on ``far``, a node the site does not have: the router follows the
  decided plan, but the group never gets a replica, so her own ``ready`` is answered by the
  router itself, 503 naming no replica group: *before the groups exist*.

Then bob asks every route of :data:`~deepedge.bench.isolation_served.MODEL_PATHS` of each,
as four callers (no key; his key, made before alice deployed; a key of his, revoked; a key
made just before the requests), and the same route of
:data:`~deepedge.bench.isolation_served.UNSERVED_MODEL`, every request at once (one may wait
for a group). A breach is a pair that differs
(:func:`~deepedge.bench.isolation_served.fingerprint`: status, body, headers but the
per-request ones), an answer naming her model or deployment, or hers answered more than
``TELL_APART_S`` after the made-up one (a router waiting for a group that never answers
tells that the name is served as surely as a status). The controls: with her own key every
route of ``alice-placed`` is told apart, and ``alice-pending``'s ``ready`` is the router's
503, before the probe and after it.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from deepedge.bench.harness.http import Client, InferenceKey, bearer, wait_until
from deepedge.bench.isolation_attacks import Arena, Outcome
from deepedge.bench.isolation_served import (
    MODEL_PATHS,
    SERVED_WAIT_S,
    UNSERVED_MODEL,
    alice_spec,
    fingerprint,
    names_leaked,
)

PLACED, PENDING = "alice-placed", "alice-pending"
NODES = {PLACED: "head", PENDING: "far"}  # "head": the embedded head; "far": no node has it
CAMERA = "c1"
GROUP_HEADER = "deepedge-group"  # (camera_router's: the group that answered)
TELL_APART_S = 2.0  # hers answered this much later than the made-up name's: a breach
REQUEST_TIMEOUT_S = 60.0  # the router answers within its group timeouts (3 s, 8 s)
CONCURRENT = 32


def placement_problem(node: str) -> dict[str, Any]:
    """One camera, one edge node ``node``, one variant of the model that fits it."""
    return {
        "name": f"alice-{node}",
        "sources": [{"id": CAMERA, "demands": [{"model": "digits", "rate_rps": 10.0,
                                                "max_latency_ms": 500.0}]}],
        "edge_nodes": [{"id": node, "memory_mb": 1500.0}],
        "links": [{"a": CAMERA, "b": node, "delay_ms": 1.0}],
        "models": [{"id": "digits", "variants": [
            {"id": "b1", "batch_size": 1, "latency_ms": 5.0, "memory_mb": 900.0,
             "max_load_rps": 30.0}]}],
    }  # fmt: skip


def placed_spec(name: str) -> dict[str, Any]:
    """Alice's digits (:func:`~deepedge.bench.isolation_served.alice_spec`) placed on
    ``NODES[name]``."""
    return {**alice_spec(), "name": name, "placement": placement_problem(NODES[name]),
            "serving": {"cpus": 0.25, "sample_fraction": 0.0, "max_batch_size": 1}}  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One request of the probe: a route of a model (method, suffix), with headers."""

    method: str
    suffix: str
    headers: Mapping[str, str]
    body: bytes | None

    def send(self, client: httpx.Client, model: str) -> tuple[httpx.Response, float]:
        """The answer and how long it took, in seconds."""
        started = time.perf_counter()
        answer = client.request(self.method, f"/v2/models/{model}{self.suffix}",
                                headers=dict(self.headers), content=self.body)  # fmt: skip
        return answer, time.perf_counter() - started


class Tell(enum.Enum):
    """How an answer of alice's model tells bob that it is served."""

    ANSWER = "answer"  # status, body or a header other than the made-up name's
    NAME = "name"  # her model's or deployment's name in it
    TIME = "time"  # more than TELL_APART_S after the made-up name's


@dataclass(frozen=True)
class Compared:
    """Bob's requests to one of alice's models against the made-up name's."""

    leaks: list[tuple[Tell, str]]
    compared: int
    statuses: set[int]
    gap_s: float  # the largest lead of the made-up name's answer over hers

    def apart(self, way: Tell) -> int:
        """How many answers told it ``way``."""
        return sum(w is way for w, _ in self.leaks)

    def told(self) -> str:
        """How many answers told, each way, with the first of each."""
        out = []
        for way in Tell:
            found = [text for w, text in self.leaks if w is way]
            if found:
                out.append(f"{len(found)} by {way.value}, e.g. {found[0]}")
        return "; ".join(out)


def requests_as(callers: Mapping[str, Mapping[str, str]], body: bytes,
                body_headers: Mapping[str, str]) -> list[tuple[str, Request]]:  # fmt: skip
    """Every route of :data:`MODEL_PATHS` as each caller (who -> headers)."""
    out = []
    for method, suffix in MODEL_PATHS:
        for who, auth in callers.items():
            posted = method == "POST"
            headers = {**auth, **body_headers} if posted else dict(auth)
            out.append((who, Request(method, suffix, headers, body if posted else None)))
    return out


def compare(client: httpx.Client, model: str, names: tuple[str, ...],
            asked: list[tuple[str, Request]]) -> Compared:  # fmt: skip
    """Each request to ``model`` and to :data:`UNSERVED_MODEL`, all at once (module
    docstring)."""
    with ThreadPoolExecutor(CONCURRENT) as pool:
        hers = [pool.submit(r.send, client, model) for _, r in asked]
        nobody = [pool.submit(r.send, client, UNSERVED_MODEL) for _, r in asked]
        pairs = [(h.result(), n.result()) for h, n in zip(hers, nobody, strict=True)]
    leaks: list[tuple[Tell, str]] = []
    statuses, gap_s = set[int](), 0.0
    for (who, request), ((her, her_s), (none, none_s)) in zip(asked, pairs, strict=True):
        statuses.add(her.status_code)
        gap_s = max(gap_s, her_s - none_s)
        ways = [way for way, holds in (
            (Tell.ANSWER, fingerprint(her) != fingerprint(none)),
            (Tell.NAME, bool(names_leaked(her, names))),
            (Tell.TIME, her_s - none_s > TELL_APART_S)) if holds]  # fmt: skip
        nobody_said = f"{none.status_code} {none.text[:40]!r} in {none_s:.2f} s"
        said = (f"{model} {request.method} {request.suffix or '/'} ({who}): "
                f"{her.status_code} {her.text[:40]!r} {_extra(her, none)}in {her_s:.2f} s "
                f"where no model: {nobody_said}")  # fmt: skip
        leaks += [(way, said) for way in ways]
    return Compared(leaks, len(asked), statuses, gap_s)


def _extra(her: httpx.Response, none: httpx.Response) -> str:
    """The headers of her answer that the made-up name's lacks or has otherwise."""
    theirs = dict(fingerprint(none)[2])
    extra = [f"{k}: {v}" for k, v in fingerprint(her)[2] if theirs.get(k) != v]
    return f"[{'; '.join(extra)}] " if extra else ""


class BobsKeys:
    """Bob's inference keys for his own deployment: made, revoked, made afresh."""

    def __init__(self, arena: Arena, deployment: str) -> None:
        self.arena, self.deployment = arena, deployment
        self.lasting = self.make("placed-lasting")["key"]
        revoked = self.make("placed-revoked")
        with arena.client() as api:
            api.delete(f"/v1/deployments/{deployment}/keys/{revoked['id']}").raise_for_status()
        self.revoked = revoked["key"]

    def make(self, name: str) -> dict[str, Any]:
        with self.arena.client() as api:
            made = api.post(f"/v1/deployments/{self.deployment}/keys", json={"name": name})
        made.raise_for_status()
        return dict(made.json())

    def callers(self) -> dict[str, dict[str, str]]:
        """The four callers, the fresh key made now."""
        fresh = self.make("placed-fresh")["key"]
        return {
            "no key": {},
            "bob's key": bearer(self.lasting),
            "bob's revoked key": bearer(self.revoked),
            "bob's fresh key": bearer(fresh),
        }


@dataclass(frozen=True)
class Placed:
    """Alice's two placed deployments as she sees them: her keys, an infer request's body."""

    keys: dict[str, InferenceKey]
    body: bytes
    body_headers: dict[str, str]
    group: str  # the group that answered her infer on alice-placed

    def names(self, deployment: str) -> tuple[str, ...]:
        return self.keys[deployment].model, deployment


def place_alice(arena: Arena, wait_s: float = SERVED_WAIT_S) -> Placed:
    """Both deployments created with her token; waited for until ``alice-placed``'s group
    answers her infer and ``alice-pending``'s router answers her ``ready`` itself
    (``RuntimeError`` past ``wait_s``)."""
    from deepedge.dataplane.camera import infer_body

    client = Client(arena.server.url, arena.victim_token, timeout_s=120.0)
    try:
        for name in (PLACED, PENDING):
            client.post("/v1/deployments", placed_spec(name))
        keys = {n: InferenceKey.of(client.post(f"/v1/deployments/{n}/keys", {"name": "own"}))
                for n in (PLACED, PENDING)}  # fmt: skip
    finally:
        client.close()
    deadline = time.monotonic() + wait_s
    with httpx.Client(timeout=REQUEST_TIMEOUT_S, trust_env=False) as http:

        def metadata() -> httpx.Response | None:
            with contextlib.suppress(httpx.HTTPError):
                return http.get(keys[PLACED].endpoint, headers=keys[PLACED].auth())
            return None

        if not wait_until(f"{PLACED}'s metadata", lambda: _status(metadata()) == 200, wait_s):
            raise RuntimeError(f"{PLACED} never answered alice's metadata")
        answer = metadata()
        assert answer is not None
        shape = [int(d) for d in answer.json()["inputs"][0]["shape"][1:]]
        body, headers = infer_body(np.zeros(shape, np.float32))
        placed = Placed(keys, body, headers, "")
        if not wait_until(f"{PLACED}'s group", lambda: bool(_group(http, placed)),
                          deadline - time.monotonic(), poll_s=1.0):  # fmt: skip
            raise RuntimeError(f"no replica group of {PLACED} answered alice's infer")
        if not wait_until(f"{PENDING}'s router", lambda: _router_answers(http, placed),
                          deadline - time.monotonic(), poll_s=1.0):  # fmt: skip
            raise RuntimeError(f"{PENDING}'s camera router never answered alice itself")
        return Placed(keys, body, headers, _group(http, placed))


def _status(answer: httpx.Response | None) -> int:
    return answer.status_code if answer is not None else 0


def _group(http: httpx.Client, placed: Placed) -> str:
    """The group that answered alice's infer on ``alice-placed`` ('' none: not yet placed,
    or not answered)."""
    key = placed.keys[PLACED]
    with contextlib.suppress(httpx.HTTPError):
        answer = http.post(key.route("infer"), content=placed.body,
                           headers={**key.auth(), **placed.body_headers})  # fmt: skip
        if answer.status_code == 200:
            return answer.headers.get(GROUP_HEADER, "")
    return ""


def _router_answers(http: httpx.Client, placed: Placed) -> bool:
    """Whether ``alice-pending``'s router answers alice's ``ready`` itself: 503, no group."""
    key = placed.keys[PENDING]
    with contextlib.suppress(httpx.HTTPError):
        answer = http.get(key.route("ready"), headers=key.auth())
        return answer.status_code == 503 and "replica group" in answer.text
    return False


def retire_placed(arena: Arena) -> None:
    """Both deployments deleted (the attacks after this one find the site as before)."""
    with arena.client(arena.victim_token) as client, contextlib.suppress(httpx.HTTPError):
        for name in (PLACED, PENDING):
            client.delete(f"/v1/deployments/{name}", params={"confirm": name})


def placed_routes(arena: Arena, bob_deployment: str) -> Outcome:
    """The probe (module docstring); bob's keys are for ``bob_deployment``."""
    bob = BobsKeys(arena, bob_deployment)  # made and revoked before alice deploys
    try:
        placed = place_alice(arena)
    except (RuntimeError, httpx.HTTPError) as exc:
        retire_placed(arena)
        return Outcome(False, f"probe failed: alice's placed models were not served: {exc}"[:200])
    try:
        return _probe(arena, placed, bob)
    finally:
        retire_placed(arena)


def _probe(arena: Arena, placed: Placed, bob: BobsKeys) -> Outcome:
    settings = arena.server.settings
    base = f"http://{settings.serving_host}:{settings.serving_port}"
    seen: dict[str, Compared] = {}
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S, trust_env=False) as client:
        for name in (PENDING, PLACED):  # before the groups exist; after they serve
            asked = requests_as(bob.callers(), placed.body, placed.body_headers)
            seen[name] = compare(client, placed.keys[name].model, placed.names(name), asked)
        hers = requests_as({"alice's key": placed.keys[PLACED].auth()}, placed.body,
                           placed.body_headers)  # fmt: skip
        mine = compare(client, placed.keys[PLACED].model, (), hers)
        group, pending = _group(client, placed), _router_answers(client, placed)
    if any(c.leaks for c in seen.values()):
        return Outcome(True, "; ".join(f"{n}: {len({t for _, t in c.leaks})} of {c.compared} "
                                       f"told it, {c.told()}" for n, c in seen.items()
                                       if c.leaks))  # fmt: skip
    told = mine.apart(Tell.ANSWER)
    if not group or not pending or told != len(MODEL_PATHS):
        return Outcome(
            False,
            f"probe failed: after it {PLACED}'s group answered alice "
            f"{group or 'not'}, {PENDING}'s router answered her itself {pending}, "
            f"her key told {told} of {len(MODEL_PATHS)} routes apart",
        )
    return Outcome(False, "; ".join(
        f"{n} ({'group ' + placed.group + ' serving' if n == PLACED else 'no group'}): "
        f"{c.compared} of bob's requests (no key, his, revoked, fresh) answered "
        f"{', '.join(map(str, sorted(c.statuses)))} as to {UNSERVED_MODEL}, at most "
        f"{c.gap_s:.2f} s later" for n, c in seen.items())
        + f"; with her key all {told} of {PLACED}'s routes told apart")  # fmt: skip
