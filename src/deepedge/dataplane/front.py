"""What the front application answers: every path no served model's application takes.

The front application is mounted on ``/``, so it gets whatever Serve routes to no other
application: the server-wide documents (:func:`~deepedge.dataplane.routes.server_route`),
a model name nothing serves, ``/`` and ``//v2/...``, and a path under the prefix of a model
the serving table does serve but whose application does not take requests yet (Serve is
still deploying it: the data plane is starting, or the deployment was just added). The
answers, in the protocol's error form:

=====================================================  =====================================
a server-wide path                                     its document (no key)
no key, or a key not live                              401 (the key table's, for any model)
a served model whose application is not up, its key    503 starting, ``Retry-After``
a served model of the key's tenant, another deployment 403 (as its application answers)
anything else: no such model, another tenant's model   404 ``unknown model``
=====================================================  =====================================

A key is checked against the model's owner exactly as the model's application checks it
(:func:`~deepedge.dataplane.keys.authorize`), so another tenant's model answers as a model
that does not exist, starting or not. :func:`front_answer` is pure: strings and tables in,
a document or an error out. :class:`FrontHandler` holds the tables the front application
follows and settles a refusal on the live keys read afresh, as every model's application
does (:class:`~deepedge.dataplane.keys.KeyCheck`): the two applications' copies of the key
table may differ for a moment, their answers may not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepedge.core.errors import DataPlaneStartingError, NotFoundError
from deepedge.dataplane.keys import KeyCheck, KeyGrant, authorize
from deepedge.dataplane.protocol import STARTING, STARTING_RETRY_AFTER_S
from deepedge.dataplane.routes import server_route

MODELS_PREFIX = "/v2/models/"


def model_of(path: str) -> str | None:
    """The model a path's route prefix names (``/v2/models/<model>[/...]``), as Serve
    routes it; None for a path outside every model's prefix."""
    if not path.startswith(MODELS_PREFIX):
        return None
    return path[len(MODELS_PREFIX) :].split("/", 1)[0] or None


def front_answer(
    path: str, method: str, authorization: str | None,
    keys: Mapping[str, KeyGrant], owners: Mapping[str, KeyGrant],
) -> dict[str, Any]:  # fmt: skip
    """The front application's answer (module docstring): the server-wide document, or
    the refusal raised. ``owners`` maps each model the serving table routes to the
    deployment and tenant it belongs to."""
    document = server_route(path, method)
    if document is not None:
        return document
    model = model_of(path)
    owner = owners.get(model) if model is not None else None
    if owner is None:
        authorize(keys, authorization, None, None)
        raise NotFoundError("unknown model")  # (authorize raises 404 first for a key)
    authorize(keys, authorization, owner.deployment_id, owner.tenant_id)
    raise DataPlaneStartingError(STARTING, STARTING_RETRY_AFTER_S)


class FrontHandler:
    """The front application's tables and answers, whatever carries its requests (Ray
    Serve's :class:`~deepedge.runtime.serving.front.Front` adapts it; tests drive it)."""

    def __init__(self, check: KeyCheck, owners: Mapping[str, KeyGrant],
                 keys: Mapping[str, KeyGrant]) -> None:  # fmt: skip
        self.check, self.owners, self.keys = check, owners, keys

    def apply(self, owners: Mapping[str, KeyGrant], keys: Mapping[str, KeyGrant]) -> None:
        self.owners, self.keys = owners, keys

    async def answer(self, path: str, method: str, authorization: str | None) -> dict[str, Any]:
        """:func:`front_answer` on the tables held, its refusal of a key settled afresh."""
        owners = self.owners
        return await self.check.settle(
            self.keys, authorization,
            lambda keys: front_answer(path, method, authorization, keys, owners),
        )  # fmt: skip
