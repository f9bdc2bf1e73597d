"""Inference keys: what a camera holds to reach one deployment's endpoint.

A key is scoped to one deployment (not its tenant's API token): random, shown once, stored
only as its SHA-256 digest (256 bits of entropy, so an unsalted digest cannot be brute
forced), and revocable. The data plane checks every request against the published table of
live keys (:class:`~deepedge.dataplane.serving_table.ServingTable`):

==========================================  ======
a missing, malformed, unknown or revoked key  401
a key of another tenant, or an unknown model  404 (another tenant's models are not there)
a key of another deployment of the tenant     403
the deployment's own key                      --
==========================================  ======

Every application of the data plane holds its own copy of that table, each following the
controller's long poll, so for a moment after a key is made or revoked one copy has the
change and another not. An answer must not depend on which copy gave it: bob's new key
answered 401 by alice's model's application and 404 by the front application (a name
nothing serves) tells bob that alice serves that name. So a copy accepts a key on its own
table, but refuses a presented key only on a table read after the request began
(:class:`KeyCheck`): the two copies then refuse from the same table, the store's, and
another tenant's model answers exactly as a model nothing serves, whatever the key's state.
The re-reads are shared and rate-bounded (:mod:`deepedge.dataplane.fresh_reads`), so random
keys cannot flood the controller. Without a key nothing is read: the 401 needs no table.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from deepedge.core.errors import ForbiddenError, NotFoundError, UnauthorizedError
from deepedge.dataplane.fresh_reads import FreshReads

log = logging.getLogger(__name__)

KEY_PREFIX = "dpk_"
REREAD_GAP_S = 0.2  # a copy re-reads the live keys at most this often (KeyCheck)

T = TypeVar("T")


@dataclass(frozen=True)
class KeyGrant:
    """What one live key opens."""

    deployment_id: str
    tenant_id: str


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def bearer(authorization: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header (None when absent or malformed)."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


def authorize(
    keys: Mapping[str, KeyGrant],
    authorization: str | None,
    deployment_id: str | None,
    tenant_id: str | None,
) -> KeyGrant:
    """Check a request's key for the deployment its URL names (None: no such model).

    Raises :class:`UnauthorizedError`, :class:`NotFoundError` or :class:`ForbiddenError`
    as the module's table says. The look-up is by digest, never by the secret itself.
    """
    key = bearer(authorization)
    if key is None:
        raise UnauthorizedError("an inference key is needed: Authorization: Bearer <key>")
    digest = key_digest(key)
    grant = keys.get(digest)
    if grant is None:
        raise UnauthorizedError("invalid or revoked inference key")
    if deployment_id is None or grant.tenant_id != tenant_id:
        raise NotFoundError("unknown model")
    if grant.deployment_id != deployment_id:
        raise ForbiddenError("this inference key is for another deployment")
    return grant


KeyTable = Mapping[str, KeyGrant]  # the live keys, by digest


class KeyCheck:
    """One copy's decisions on keys (module docstring): ``decide(table)`` (a pure function
    raising the refusal, :func:`authorize` or one built on it) is taken on the table the
    copy holds when it accepts; when it refuses a presented key, it is taken again on a
    table ``read_keys`` read after the request began, and that answer stands. ``read_keys``
    None (nothing to ask) or failing (the controller away): the held table's refusal."""

    def __init__(
        self, read_keys: Callable[[], Awaitable[KeyTable]] | None,
        min_gap_s: float = REREAD_GAP_S, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.reads = FreshReads(read_keys, min_gap_s, clock) if read_keys is not None else None
        self._clock = clock

    async def settle(
        self, held: KeyTable, authorization: str | None, decide: Callable[[KeyTable], T]
    ) -> T:
        """``decide``'s answer for a request that begins now (the class docstring)."""
        began_s = self._clock()
        try:
            return decide(held)
        except (UnauthorizedError, NotFoundError):  # (a ForbiddenError is an Unauthorized)
            if self.reads is None or bearer(authorization) is None:
                raise
            reads = self.reads
        try:
            fresh = await reads.fresh(began_s)
        except Exception as exc:  # the controller away: its last table, as when it is down
            log.info("live keys not re-read (%s): refused on the table held", exc)
            fresh = held
        return decide(fresh)

    async def authorize(
        self, held: KeyTable, authorization: str | None, deployment_id: str | None,
        tenant_id: str | None,
    ) -> KeyGrant:  # fmt: skip
        """:func:`authorize`, settled as the class docstring says."""
        return await self.settle(
            held, authorization, lambda keys: authorize(keys, authorization, deployment_id,
                                                        tenant_id)
        )  # fmt: skip
