"""The router's per-request choice and the inference-key checks, table-driven."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

import pytest

from deepedge.core.errors import ForbiddenError, NotFoundError, UnauthorizedError
from deepedge.dataplane.keys import KeyCheck, KeyGrant, authorize, bearer, key_digest, new_key
from deepedge.dataplane.routing import RouteKind, Versions, choose


@pytest.mark.parametrize(
    ("versions", "draw", "pinned", "expected"),
    [
        (Versions(3), 0.0, None, (3, RouteKind.SERVING)),
        (Versions(3, canary=4, canary_share=0.25), 0.1, None, (4, RouteKind.CANARY)),
        (Versions(3, canary=4, canary_share=0.25), 0.25, None, (3, RouteKind.SERVING)),
        (Versions(3, canary=4, canary_share=0.25, previous=2), 0.9, 2, (2, RouteKind.PINNED)),
        (Versions(3, canary=4, canary_share=0.25), 0.1, 3, (3, RouteKind.PINNED)),
    ],
)
def test_choose(versions: Versions, draw: float, pinned: int | None,
                expected: tuple[int, RouteKind]) -> None:  # fmt: skip
    assert choose(versions, draw, pinned) == expected


def test_a_pinned_version_that_is_not_served_is_404() -> None:
    with pytest.raises(NotFoundError, match="version 9 is not being served"):
        choose(Versions(3, previous=2), 0.5, 9)


@pytest.mark.parametrize("share", [0.05, 0.25, 0.5])
def test_the_canary_share_is_met_per_request(share: float) -> None:
    rng = random.Random(7)
    versions = Versions(1, canary=2, canary_share=share)
    n = 20_000
    canary = sum(choose(versions, rng.random())[1] is RouteKind.CANARY for _ in range(n))
    assert abs(canary / n - share) < 0.01


MINE, OTHER_DEPLOYMENT, OTHER_TENANT = new_key(), new_key(), new_key()
KEYS = {
    key_digest(MINE): KeyGrant("d1", "t1"),
    key_digest(OTHER_DEPLOYMENT): KeyGrant("d2", "t1"),
    key_digest(OTHER_TENANT): KeyGrant("d9", "t9"),
}


@pytest.mark.parametrize(
    ("header", "deployment", "error"),
    [
        (f"Bearer {MINE}", "d1", None),
        (f"bearer {MINE}", "d1", None),
        (None, "d1", UnauthorizedError),
        ("Bearer ", "d1", UnauthorizedError),
        (f"Basic {MINE}", "d1", UnauthorizedError),
        ("Bearer dpk_not-a-key", "d1", UnauthorizedError),
        ("Bearer dpk_not-a-key", None, UnauthorizedError),  # no key: no word on the model
        (f"Bearer {OTHER_TENANT}", "d1", NotFoundError),  # another tenant: not there
        (f"Bearer {MINE}", None, NotFoundError),  # an unknown model
        (f"Bearer {OTHER_DEPLOYMENT}", "d1", ForbiddenError),
    ],
    # ids that do not name the random keys: every process collects the same tests
    ids=["mine", "mine-lowercase", "no-header", "empty", "basic", "unknown-key",
         "unknown-key-no-model", "other-tenant", "unknown-model", "other-deployment"],
)  # fmt: skip
def test_authorize(header: str | None, deployment: str | None,
                   error: type[Exception] | None) -> None:  # fmt: skip
    tenant = "t1" if deployment is not None else None
    if error is None:
        assert authorize(KEYS, header, deployment, tenant) == KeyGrant("d1", "t1")
    else:
        with pytest.raises(error):
            authorize(KEYS, header, deployment, tenant)


def test_keys_are_random_and_only_their_digest_is_compared() -> None:
    assert new_key() != new_key() and new_key().startswith("dpk_")
    assert bearer("Bearer  abc ") == "abc" and bearer(None) is None
    revoked = {d: g for d, g in KEYS.items() if d != key_digest(MINE)}
    with pytest.raises(UnauthorizedError, match="revoked"):
        authorize(revoked, f"Bearer {MINE}", "d1", "t1")


NONE: dict[str, KeyGrant] = {}


class Store:
    """The live keys as the controller reads them now; ``lost``: it cannot be reached."""

    def __init__(self, keys: Mapping[str, KeyGrant], lost: bool = False) -> None:
        self.keys, self.lost, self.asked = keys, lost, 0

    async def live_keys(self) -> Mapping[str, KeyGrant]:
        self.asked += 1
        await asyncio.sleep(0.01)
        if self.lost:
            raise ConnectionError("the controller is restarting")
        return self.keys


@pytest.mark.parametrize(
    ("held", "store", "header", "deployment", "expected", "asked"),
    [
        (KEYS, KEYS, f"Bearer {MINE}", "d1", None, 0),  # held and live: no ask
        (NONE, KEYS, f"Bearer {MINE}", "d1", None, 1),  # made: the copy has not got it
        (KEYS, NONE, f"Bearer {MINE}", "d1", None, 0),  # an accept stands on the copy
        (KEYS, NONE, f"Bearer {OTHER_TENANT}", "d1", UnauthorizedError, 1),  # revoked
        (NONE, KEYS, f"Bearer {OTHER_TENANT}", "d1", NotFoundError, 1),  # made, foreign
        (KEYS, KEYS, f"Bearer {MINE}", None, NotFoundError, 1),
        (NONE, KEYS, f"Bearer {OTHER_DEPLOYMENT}", "d1", ForbiddenError, 1),
        (NONE, NONE, "Bearer dpk_not-a-key", "d1", UnauthorizedError, 1),
        (KEYS, KEYS, None, "d1", UnauthorizedError, 0),  # no key: no table needed
        (KEYS, KEYS, f"Basic {MINE}", "d1", UnauthorizedError, 0),
    ],
    ids=["held", "made", "accepted-on-the-copy", "revoked-foreign", "made-foreign",
         "unknown-model", "made-other-deployment", "unknown-key", "no-header", "basic"],
)  # fmt: skip
def test_a_refusal_of_a_key_is_settled_on_the_keys_read_afresh(
    held: dict[str, KeyGrant], store: dict[str, KeyGrant], header: str | None,
    deployment: str | None, expected: type[Exception] | None, asked: int,
) -> None:  # fmt: skip
    source = Store(store)
    check = KeyCheck(source.live_keys)
    tenant = "t1" if deployment is not None else None
    if expected is None:
        grant = asyncio.run(check.authorize(held, header, deployment, tenant))
        assert grant == KeyGrant("d1", "t1")
    else:
        with pytest.raises(expected) as caught:
            asyncio.run(check.authorize(held, header, deployment, tenant))
        assert type(caught.value) is expected
    assert source.asked == asked


def test_concurrent_refusals_share_one_read_of_the_keys() -> None:
    """A flood of random keys costs the controller one read per gap, not one per key."""
    source = Store(KEYS)
    check = KeyCheck(source.live_keys, min_gap_s=0.2)

    async def flood() -> list[BaseException | KeyGrant]:
        return await asyncio.gather(
            *(check.authorize(KEYS, f"Bearer {new_key()}", "d1", "t1") for _ in range(200)),
            return_exceptions=True,
        )  # fmt: skip

    answers = asyncio.run(flood())
    assert all(isinstance(a, UnauthorizedError) for a in answers)
    assert source.asked == 1


def test_with_the_controller_away_a_key_is_refused_on_the_table_held() -> None:
    source = Store(KEYS, lost=True)
    check = KeyCheck(source.live_keys)
    with pytest.raises(NotFoundError):
        asyncio.run(check.authorize(KEYS, f"Bearer {OTHER_TENANT}", "d1", "t1"))
    assert source.asked == 1
