"""The router's per-request choice and the inference-key checks, table-driven."""

from __future__ import annotations

import random

import pytest

from deepedge.core.errors import ForbiddenError, NotFoundError, UnauthorizedError
from deepedge.dataplane.keys import KeyGrant, authorize, bearer, key_digest, new_key
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
