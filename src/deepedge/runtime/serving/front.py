"""The front application: Ray Serve's side of :mod:`deepedge.dataplane.front`.

:class:`Front` is the Serve application on ``/``: it answers the server-wide routes and
every path no served model's application takes, in the protocol's JSON (never Serve's
plain-text 404). It follows the serving table's keys and the models it routes (each one's
deployment and tenant) with the controller's long poll
(:meth:`~deepedge.runtime.serving.dataplane.DataPlaneController.front_table`), so a
served model whose application is still being deployed is answered 503 starting to its
own key, and as an unknown model to anyone else. What it answers is
:class:`~deepedge.dataplane.front.FrontHandler`'s, a key refused only on the live keys the
controller reads afresh (:meth:`ControllerPoll.live_keys`), as every model's application.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from deepedge.core.errors import DeepEdgeError
from deepedge.dataplane.front import FrontHandler
from deepedge.dataplane.inference import JSON
from deepedge.dataplane.keys import KeyCheck, KeyGrant
from deepedge.dataplane.protocol import error_body, error_headers, json_bytes
from deepedge.runtime.serving.controller_poll import ControllerPoll
from deepedge.runtime.serving.model_server import POLL_WAIT_S
from deepedge.runtime.serving.serve_apps import CONTROLLER, NAMESPACE


class Front:
    """``/`` (module docstring)."""

    def __init__(self) -> None:
        self._poll = ControllerPoll(CONTROLLER, NAMESPACE,
                                    lambda c, held, wait_s: c.front_table.remote(held, wait_s),
                                    "served models and inference keys")  # fmt: skip
        self.handler = FrontHandler(KeyCheck(self._poll.live_keys), *self._poll.first())
        self._follower: asyncio.Task[None] | None = None

    async def _apply(self, owners: dict[str, KeyGrant], keys: dict[str, KeyGrant]) -> None:
        self.handler.apply(owners, keys)

    async def __call__(self, request: Request) -> Response:
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._poll.follow(self._apply, POLL_WAIT_S))
        try:
            document = await self.handler.answer(
                request.url.path, request.method, request.headers.get("authorization")
            )
        except DeepEdgeError as exc:
            return Response(error_body(exc.message), exc.http_status,
                            headers=error_headers(exc), media_type=JSON)  # fmt: skip
        return Response(json_bytes(document), 200, media_type=JSON)
