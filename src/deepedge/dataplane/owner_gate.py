"""Who a placed deployment's camera router forwards to, and who hears it answer itself.

The camera router (:mod:`deepedge.runtime.serving.camera_router`) forwards a request to a
replica group, whose model server checks its key; but what the router adds says that the
model name is served: its own answers (503: the deployment has no replica groups yet, or
none of them answered), the headers it puts on a group's answer (``deepedge-group``,
``deepedge-fallback``), and the time it waits for a group that does not answer (seconds,
where a made-up name is answered at once). So it forwards only a request whose key opens
this model's deployment (its owner's), and answers anyone else before any group is asked,
with what every other copy of the key table answers for the model, which for another
tenant's key, a key not live or none is exactly what a model nothing serves is answered
(:func:`~deepedge.dataplane.keys.authorize`, a refusal settled on the live keys read
afresh by :class:`~deepedge.dataplane.keys.KeyCheck`). Without the model in the router's
table the owner is unknown: everyone gets the unknown model's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from deepedge.core.errors import DeepEdgeError
from deepedge.dataplane.inference import Reply, refusal_reply
from deepedge.dataplane.keys import KeyCheck, KeyGrant
from deepedge.dataplane.serving_table import ModelRoute


class OwnerGate:
    """The router's copy of its model's route and of the key table, and its answers
    (module docstring), whatever carries its requests."""

    def __init__(self, check: KeyCheck, route: ModelRoute | None,
                 keys: Mapping[str, KeyGrant]) -> None:  # fmt: skip
        self.check, self.route, self.keys = check, route, keys

    def apply(self, route: ModelRoute | None, keys: Mapping[str, KeyGrant]) -> None:
        self.route, self.keys = route, keys

    async def refusal(self, authorization: str | None) -> Reply | None:
        """None for the deployment's own key; else the answer the model's other copies
        of the key table give that caller."""
        route = self.route
        try:
            await self.check.authorize(self.keys, authorization,
                                       route.deployment_id if route else None,
                                       route.tenant_id if route else None)  # fmt: skip
        except DeepEdgeError as exc:
            return refusal_reply(exc)
        return None

    async def answer(self, authorization: str | None,
                     forward: Callable[[], Awaitable[Reply]]) -> Reply:  # fmt: skip
        """What ``forward`` answers (a group's answer, or the router's own) to the owner;
        the refusal to anyone else, ``forward`` never called."""
        refused = await self.refusal(authorization)
        return await forward() if refused is None else refused
