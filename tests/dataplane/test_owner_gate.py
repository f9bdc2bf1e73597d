"""A placed deployment's camera router forwards a request, or answers its own errors (no
replica groups yet, none answered), only for the deployment's own key; anyone else is
answered exactly as the front answers a model nothing serves, whatever the router's copy of
the key table holds, before any group is asked (a group's answer carries the router's
headers, and a group that does not answer is waited for)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from deepedge.core.errors import DeepEdgeError
from deepedge.dataplane.front import FrontHandler
from deepedge.dataplane.inference import Reply
from deepedge.dataplane.keys import KeyCheck, KeyGrant, key_digest
from deepedge.dataplane.owner_gate import OwnerGate
from deepedge.dataplane.protocol import classifier_signature, error_body, error_headers
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.serving_table import ModelRoute, ReplicaShape

ALICE_CAM, ALICE_DOOR, BOB_CAM = "dpk_alice_cam", "dpk_alice_door", "dpk_bob_cam"
BOB_NEW, REVOKED, MADE_UP = "dpk_bob_new", "dpk_revoked", "dpk_never_made"
GRANTS = {
    ALICE_CAM: KeyGrant("d-cam", "alice"),
    ALICE_DOOR: KeyGrant("d-door", "alice"),
    BOB_CAM: KeyGrant("d-bob", "bob"),
    BOB_NEW: KeyGrant("d-bob", "bob"),
    REVOKED: KeyGrant("d-bob", "bob"),
}
OWNERS = {"alice.cam": KeyGrant("d-cam", "alice"), "bob.cam": KeyGrant("d-bob", "bob")}
ALICE_CAM_ROUTE = ModelRoute("alice.cam", "d-cam", "alice", classifier_signature((1, 4, 4), 2),
                             ("a", "b"), Versions(1), {1: "v1.onnx"}, {1: "1"},
                             ReplicaShape())  # fmt: skip
NO_GROUPS = Reply(503, error_body("alice.cam has no replica groups yet"))


def table(*keys: str) -> dict[str, KeyGrant]:
    return {key_digest(k): GRANTS[k] for k in keys}


class Store:
    """The live keys as the store holds them now (what a copy reads before it refuses)."""

    def __init__(self, keys: Mapping[str, KeyGrant]) -> None:
        self.keys = keys

    async def live_keys(self) -> Mapping[str, KeyGrant]:
        return self.keys


def _auth(key: str | None) -> str | None:
    return None if key is None else f"Bearer {key}"


class Groups:
    """What the router forwards to: ``reply`` (its own 503 by default), each call counted."""

    def __init__(self, reply: Reply = NO_GROUPS) -> None:
        self.reply, self.calls = reply, 0

    async def forward(self) -> Reply:
        self.calls += 1
        return self.reply


def router_answer(gate: OwnerGate, key: str | None,
                  groups: Groups | None = None) -> tuple[int, bytes, dict[str, str]]:  # fmt: skip
    reply = asyncio.run(gate.answer(_auth(key), (groups or Groups()).forward))
    return reply.status, reply.body, reply.headers


def unknown_model_answer(front: FrontHandler, key: str | None) -> tuple[int, bytes, dict[str, str]]:
    """The front's answer for a name nothing serves, as it sends it."""
    try:
        asyncio.run(front.answer("/v2/models/alice.nothing/ready", "GET", _auth(key)))
    except DeepEdgeError as exc:
        return exc.http_status, error_body(exc.message), error_headers(exc) or {}
    raise AssertionError("the front answered a made-up name")


LIVE = table(ALICE_CAM, ALICE_DOOR, BOB_CAM)


@pytest.mark.parametrize(
    ("case", "key", "router_holds", "now", "status"),
    [
        ("another tenant's key", BOB_CAM, LIVE, LIVE, 404),
        ("no key", None, LIVE, LIVE, 401),
        ("a key never made", MADE_UP, LIVE, LIVE, 401),
        ("another tenant's revoked key, the router's copy behind", REVOKED,
         table(ALICE_CAM, REVOKED), LIVE, 401),
        ("another tenant's new key, the router's copy behind", BOB_NEW, LIVE,
         table(ALICE_CAM, BOB_NEW), 404),
    ],
)  # fmt: skip
def test_a_placed_model_without_groups_answers_anyone_but_its_owner_as_an_unknown_model(
    case: str, key: str | None, router_holds: dict[str, KeyGrant], now: dict[str, KeyGrant],
    status: int,
) -> None:  # fmt: skip
    store = Store(now)
    gate = OwnerGate(KeyCheck(store.live_keys), ALICE_CAM_ROUTE, router_holds)
    front = FrontHandler(KeyCheck(store.live_keys), OWNERS, now)
    answer = router_answer(gate, key)
    assert answer == unknown_model_answer(front, key), case
    assert answer[0] == status, case
    assert b"replica groups" not in answer[1], case


def test_the_owner_gets_the_routers_own_answer() -> None:
    gate = OwnerGate(KeyCheck(Store(LIVE).live_keys), ALICE_CAM_ROUTE, LIVE)
    status, body, _ = router_answer(gate, ALICE_CAM)
    assert (status, body) == (503, error_body("alice.cam has no replica groups yet"))


def test_the_tenants_other_deployment_key_is_answered_as_by_the_models_application() -> None:
    gate = OwnerGate(KeyCheck(Store(LIVE).live_keys), ALICE_CAM_ROUTE, LIVE)
    status, body, _ = router_answer(gate, ALICE_DOOR)
    assert (status, body) == (403, error_body("this inference key is for another deployment"))


@pytest.mark.parametrize("key", [ALICE_CAM, BOB_CAM, None, MADE_UP])
def test_a_router_without_its_models_route_answers_everyone_as_an_unknown_model(
    key: str | None,
) -> None:
    store = Store(LIVE)
    gate = OwnerGate(KeyCheck(store.live_keys), None, LIVE)
    front = FrontHandler(KeyCheck(store.live_keys), OWNERS, LIVE)
    assert router_answer(gate, key) == unknown_model_answer(front, key)


def test_a_route_applied_later_lets_the_owner_hear_the_router() -> None:
    gate = OwnerGate(KeyCheck(None), None, {})
    assert router_answer(gate, ALICE_CAM)[0] == 401
    gate.apply(ALICE_CAM_ROUTE, LIVE)
    assert router_answer(gate, ALICE_CAM)[0] == 503


# A group's answer as the router passes it on: the group's own refusal would be the front's,
# but the router's headers name the group
GROUP_ANSWER = Reply(200, b'{"outputs":[]}', {"deepedge-group": "b1@head",
                                              "deepedge-fallback": "0"}, None)  # fmt: skip


@pytest.mark.parametrize(
    ("key", "forwarded"),
    [(ALICE_CAM, 1), (BOB_CAM, 0), (None, 0), (MADE_UP, 0), (REVOKED, 0), (ALICE_DOOR, 0)],
)
def test_only_the_owners_request_is_forwarded_to_a_group(key: str | None, forwarded: int) -> None:
    store = Store(LIVE)
    gate = OwnerGate(KeyCheck(store.live_keys), ALICE_CAM_ROUTE, LIVE)
    front = FrontHandler(KeyCheck(store.live_keys), OWNERS, LIVE)
    groups = Groups(GROUP_ANSWER)
    answer = router_answer(gate, key, groups)
    assert groups.calls == forwarded
    if forwarded:
        assert answer == (200, GROUP_ANSWER.body, GROUP_ANSWER.headers)
        return
    assert "deepedge-group" not in answer[2]
    if key != ALICE_DOOR:  # (her other deployment's key: 403, as its model server answers)
        assert answer == unknown_model_answer(front, key)


def test_a_refused_caller_is_answered_without_waiting_for_a_silent_group() -> None:
    gate = OwnerGate(KeyCheck(Store(LIVE).live_keys), ALICE_CAM_ROUTE, LIVE)

    async def silent() -> Reply:  # a group with no replica: the router would wait seconds
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def asked(key: str | None) -> Reply:
        return await asyncio.wait_for(gate.answer(_auth(key), silent), 1.0)

    assert asyncio.run(asked(BOB_CAM)).status == 404
    assert asyncio.run(asked(None)).status == 401
    with pytest.raises(TimeoutError):  # the owner's request is forwarded, and waits
        asyncio.run(asked(ALICE_CAM))
