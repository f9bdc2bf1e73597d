"""Another tenant's model, served and answering, for the probes of the data plane's own
routes (:mod:`deepedge.bench.isolation_host`): what bob learns of alice's model.

Alice deploys the site's digits (one first version, trained briefly: the probe needs a
served model, not a good one) and the data plane serves it; she confirms it with her own
inference key: a 200 to ``ready`` and to an ``infer`` of a blank image of the shape her
model's metadata gives. While it answers her, every route under her model's prefix
(metadata, ``ready``, ``config``, ``stats``, a version's, ``infer``) asked without a key
and with bob's key must answer exactly what the same route of a model nothing serves
answers (:func:`existence_leaks`): the same status, body and headers but the per-request
ones. Any other answer tells bob that alice serves that name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
import numpy as np

from deepedge.bench.harness.http import Client, InferenceKey
from deepedge.bench.harness.site import served_key
from deepedge.bench.isolation_attacks import Arena

ALICE_DEPLOYMENT = "alice-served"
SERVED_WAIT_S = 900.0  # her first version: trained, exported, checked, its replica up
UNSERVED_MODEL = "alice.nothing-served"  # a name of alice's that no deployment has
VOLATILE_HEADERS = frozenset({"date", "x-request-id"})  # differ from one request to the next
MODEL_PATHS = (("GET", ""), ("GET", "/ready"), ("GET", "/config"), ("GET", "/stats"),
               ("GET", "/versions/1"), ("GET", "/versions/1/ready"), ("POST", "/infer"),
               ("POST", "/versions/1/infer"))  # fmt: skip


def alice_spec() -> dict[str, object]:
    """Alice's deployment: the digits, one window learnt for one epoch, no updates, one
    replica of half a core, nothing sampled."""
    return {"name": ALICE_DEPLOYMENT, "workload": "digits", "labeller": "ground-truth",
            "window_s": 60.0, "base_windows": 1, "base_epochs": 1,
            "trigger": {"sample_count": None, "accuracy_threshold": 0.0,
                        "cooldown_windows": 1000},
            "serving": {"replicas": 1, "cpus": 0.5, "sample_fraction": 0.0}}  # fmt: skip


@dataclass(frozen=True)
class Served:
    """Alice's model as she sees it: her key, and the statuses of her own ``ready`` and
    ``infer`` (200 each when it is served and answering) and the infer request's body."""

    deployment: str
    key: InferenceKey
    ready_status: int
    infer_status: int
    infer_body: bytes
    infer_headers: Mapping[str, str]

    @property
    def model(self) -> str:
        return self.key.model

    @property
    def answering(self) -> bool:
        return self.ready_status == 200 and self.infer_status == 200

    def names(self) -> tuple[str, str]:
        """What no answer to another may hold: her model's name and her deployment's."""
        return self.model, self.deployment

    def evidence(self) -> str:
        return (f"alice's {self.model} served and answering her own key during the probe "
                f"(ready {self.ready_status}, infer {self.infer_status})")  # fmt: skip


def serve_alice(arena: Arena, wait_s: float = SERVED_WAIT_S) -> Served:
    """Alice's deployment created with her token and waited for until her key's ``ready``
    answers 200 (``RuntimeError`` past ``wait_s``); then one inference of hers."""
    from deepedge.dataplane.camera import infer_body

    client = Client(arena.server.url, arena.victim_token, timeout_s=120.0)
    try:
        client.post("/v1/deployments", alice_spec())
        key = served_key(client, ALICE_DEPLOYMENT, wait_s, body={"name": "own"})
    finally:
        client.close()
    with httpx.Client(headers=key.auth(), timeout=30.0, trust_env=False) as http:
        metadata = http.get(key.endpoint)
        metadata.raise_for_status()
        shape = [int(d) for d in metadata.json()["inputs"][0]["shape"][1:]]
        body, headers = infer_body(np.zeros(shape, np.float32))
        inferred = http.post(key.route("infer"), content=body, headers=headers)
        ready = http.get(key.route("ready"))
    return Served(ALICE_DEPLOYMENT, key, ready.status_code, inferred.status_code, body, headers)


def retire_alice(arena: Arena) -> None:
    """Alice's deployment deleted (the attacks after this one find the site as before)."""
    with arena.client(arena.victim_token) as client, contextlib.suppress(httpx.HTTPError):
        client.delete(f"/v1/deployments/{ALICE_DEPLOYMENT}",
                      params={"confirm": ALICE_DEPLOYMENT})  # fmt: skip


def fingerprint(answer: httpx.Response) -> tuple[int, bytes, tuple[tuple[str, str], ...]]:
    """What an answer tells its caller: status, body and every header but the
    per-request ones."""
    kept = sorted((k.lower(), v) for k, v in answer.headers.items()
                  if k.lower() not in VOLATILE_HEADERS)  # fmt: skip
    return answer.status_code, answer.content, tuple(kept)


def names_leaked(answer: httpx.Response, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` the answer's body or headers hold."""
    told = answer.text + " ".join(f"{k}: {v}" for k, v in answer.headers.items())
    return [n for n in names if n in told]


def existence_leaks(
    client: httpx.Client, served: Served, callers: Mapping[str, Mapping[str, str]]
) -> tuple[list[str], int]:
    """Each route of :data:`MODEL_PATHS` of alice's model and of :data:`UNSERVED_MODEL`,
    asked as each of ``callers`` (who -> headers): where the two answers differ, or alice's
    answer names her model or deployment. Also the number of requests compared."""
    leaks, compared = [], 0
    for method, suffix in MODEL_PATHS:
        for who, auth in callers.items():
            sent = {**auth, **served.infer_headers} if method == "POST" else dict(auth)
            body = served.infer_body if method == "POST" else None
            hers = client.request(method, f"/v2/models/{served.model}{suffix}",
                                  headers=sent, content=body)  # fmt: skip
            nobody = client.request(method, f"/v2/models/{UNSERVED_MODEL}{suffix}",
                                    headers=sent, content=body)  # fmt: skip
            compared += 1
            named = names_leaked(hers, served.names())
            if fingerprint(hers) != fingerprint(nobody) or named:
                naming = f" naming {', '.join(named)}" if named else ""
                leaks.append(f"{method} {suffix or '/'} ({who}): {hers.status_code} "
                             f"{hers.text[:50]!r} where no model: {nobody.status_code} "
                             f"{nobody.text[:50]!r}{naming}")  # fmt: skip
    return leaks, compared
