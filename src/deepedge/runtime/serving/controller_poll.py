"""A replica's long poll of the data-plane controller.

The camera router (:mod:`deepedge.runtime.serving.camera_router`) follows its model's group plan,
every model server (:mod:`deepedge.runtime.serving.model_server`) its model's serving table and the
front application (:class:`deepedge.runtime.serving.front.Front`) the served models' owners
and the inference keys, the same way: ask the controller for what it routes now, answered
at once when the revision the asker holds is no longer current, else after ``wait_s``;
apply a new revision; and, when the controller cannot be reached (it is restarting), keep
serving the last one applied and look the controller up again by its name. A copy of the
key table about to refuse a key asks the controller for the live keys as the store holds
them now (:meth:`ControllerPoll.live_keys`; :class:`deepedge.dataplane.keys.KeyCheck`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from deepedge.dataplane.keys import KeyGrant

log = logging.getLogger(__name__)

RETRY_S = 1.0  # between tries while the controller cannot be reached
LIVE_KEYS_TIMEOUT_S = 2.0  # a refusal waits no longer for the keys read afresh

# ask(controller handle, revision held, wait_s) -> the controller's call (awaitable); its
# answer is a tuple whose last item is the revision it carries
Ask = Callable[[Any, str, float], Any]


class ControllerPoll:
    """One asker's long poll of the named controller actor (module docstring)."""

    def __init__(self, controller: str, namespace: str, ask: Ask, what: str) -> None:
        self._name, self._namespace = controller, namespace
        self._ask, self._what = ask, what
        self.handle: Any = ray.get_actor(controller, namespace=namespace)
        self.revision = ""

    def first(self) -> tuple[Any, ...]:
        """What the controller routes now, without its revision (blocking: for the asker's
        constructor, which applies it); that revision is the one held from then on."""
        answer = tuple(ray.get(self._ask(self.handle, "", 0.0)))
        self.revision = answer[-1]
        return answer[:-1]

    async def follow(self, apply: Callable[..., Awaitable[None]], wait_s: float) -> None:
        """For ever (cancel to stop): ``apply`` the items of each answer whose revision is
        new (the revision itself left out); that revision is held once ``apply`` returns."""
        while True:
            try:
                answer = await self._ask(self.handle, self.revision, wait_s)
                if answer[-1] != self.revision:
                    await apply(*answer[:-1])
                    self.revision = answer[-1]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the controller restarting: keep the last applied
                log.info("%s unavailable (%s); keeping revision %s", self._what, exc,
                         self.revision)  # fmt: skip
                await asyncio.sleep(RETRY_S)
                with contextlib.suppress(ValueError):
                    self.handle = ray.get_actor(self._name, namespace=self._namespace)

    async def live_keys(self) -> dict[str, KeyGrant]:
        """The live keys, read from the store after this call reached the controller
        (:meth:`~deepedge.runtime.serving.dataplane.DataPlaneController.live_keys`); raises
        past ``LIVE_KEYS_TIMEOUT_S`` or when the controller cannot be reached."""
        keys: dict[str, KeyGrant] = await asyncio.wait_for(
            _awaited(self.handle.live_keys.remote()), LIVE_KEYS_TIMEOUT_S
        )
        return keys


def table_poll(controller: str, namespace: str, model: str) -> ControllerPoll:
    """The long poll of ``model``'s serving table (its route and the live keys), as every
    copy of that table follows it: each model server and a placed deployment's camera
    router (whose :class:`~deepedge.dataplane.keys.KeyCheck` reads :meth:`live_keys`)."""
    return ControllerPoll(controller, namespace,
                          lambda c, held, wait_s: c.table_for.remote(model, held, wait_s),
                          "serving table")  # fmt: skip


async def _awaited(ref: Any) -> Any:
    return await ref
