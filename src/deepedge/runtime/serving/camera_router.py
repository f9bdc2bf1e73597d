"""A placed deployment's ingress: the camera router that stays while its groups move.

A deployment with a placement is served by replica groups
(:mod:`deepedge.dataplane.replica_groups`), each a Serve application of its own
(:func:`group_app`) running :class:`~deepedge.runtime.serving.model_server.ModelServer` replicas
pinned to the group's node. The deployment's own application, on ``/v2/models/<model>``, is
a :class:`CameraRouter` on the data plane controller's node (never a worker's: losing a
worker never loses it). It sends each request (its camera in the ``deepedge-camera``
header) to the group the plan routes that camera to, as a
:class:`~deepedge.runtime.serving.model_server.Forwarded` request; when that group does not answer
within ``GROUP_TIMEOUT_S`` (its node lost, before the controller re-places it) the request
goes to the next group (the last one is given ``LAST_GROUP_TIMEOUT_S``), the failed group
is tried last for a while but probed (:mod:`deepedge.dataplane.group_health`), and the
answer says so (``deepedge-fallback: 1``, ``deepedge-group``).

The router's Serve arguments are its model and the controller's name only, never the plan,
so a re-placement redeploys only groups and never restarts the router: it follows the plan
the controller routes (a long poll of
:meth:`~deepedge.runtime.serving.dataplane.DataPlaneController.plan_for`, which is also its report
of the revision it follows) and gets each group's handle by the group's Serve names. The
controller routes a new plan only once its groups run, and deletes the groups the router
left only after it has switched (:mod:`deepedge.dataplane.group_moves`).

Only a request with the deployment's own key is forwarded, or hears the router's own
answers (no groups yet, none answered); anyone else is answered at once as for a model
nothing serves, before any group is asked (:class:`~deepedge.dataplane.owner_gate.OwnerGate`:
the router's headers on a group's answer, and its wait for a group that does not answer,
would tell that the name is served). For that it follows its model's serving table as a
model server does (:func:`table_poll`, a refusal settled on the live keys read afresh).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from deepedge.dataplane.group_health import GroupHealth
from deepedge.dataplane.inference import Reply
from deepedge.dataplane.keys import KeyCheck, KeyGrant
from deepedge.dataplane.owner_gate import OwnerGate
from deepedge.dataplane.protocol import error_body
from deepedge.dataplane.replica_groups import (
    CAMERA_HEADER,
    GroupPlan,
    ReplicaGroup,
    fallback_order,
    route_camera,
)
from deepedge.dataplane.serving_table import ModelRoute
from deepedge.runtime.serving.controller_poll import ControllerPoll, table_poll
from deepedge.runtime.serving.model_server import POLL_WAIT_S, Answer, Forwarded

log = logging.getLogger(__name__)

GROUP_HEADER = "deepedge-group"  # the replica group that answered
FALLBACK_HEADER = "deepedge-fallback"  # "1": not the group the placement routes to
GROUP_TIMEOUT_S = 3.0  # a group silent this long is taken for lost: the next one answers
# The last group left is waited for longer: a slow answer (a loaded node) beats a 503. A
# client waits at most GROUP_TIMEOUT_S per other group plus this.
LAST_GROUP_TIMEOUT_S = 8.0
GROUP_APP_PREFIX = "groups-"  # a replica group's Serve application (group_app)


class CameraRouter:
    """The ingress of a deployment served by replica groups (module docstring)."""

    def __init__(self, model: str, controller: str, namespace: str) -> None:
        self.model = model
        self._poll = ControllerPoll(controller, namespace,
                                    lambda c, held, wait_s: c.plan_for.remote(model, held, wait_s),
                                    "group plan")  # fmt: skip
        self._routing: tuple[GroupPlan, dict[str, Any]] | None = None  # plan, group handles
        self._health = GroupHealth()  # which groups failed: tried last, and probed
        self._table = table_poll(controller, namespace, model)
        self.gate = OwnerGate(KeyCheck(self._table.live_keys), *self._table.first())
        self._followers: list[asyncio.Task[None]] = []
        self._apply(*self._poll.first())

    def _apply(self, plan: GroupPlan | None) -> None:
        if plan is not None:
            handles = self._routing[1] if self._routing is not None else {}
            self._routing = plan, {
                g.name: handles.get(g.name)
                or serve.get_deployment_handle(group_deployment(g), group_app(self.model, g),
                                               _check_exists=False)
                for g in plan.groups
            }  # fmt: skip
        else:
            self._routing = None

    async def _apply_next(self, plan: GroupPlan | None) -> None:
        self._apply(plan)

    async def _apply_table(self, route: ModelRoute | None, keys: dict[str, KeyGrant]) -> None:
        self.gate.apply(route, keys)

    async def check_health(self) -> None:
        """(Serve calls this every few seconds from the start: the plan is followed before
        the first request too.)"""
        self._start_following()

    def _start_following(self) -> None:
        if not self._followers or any(f.done() for f in self._followers):
            for follower in self._followers:
                follower.cancel()
            self._followers = [
                asyncio.create_task(self._poll.follow(self._apply_next, POLL_WAIT_S)),
                asyncio.create_task(self._table.follow(self._apply_table, POLL_WAIT_S)),
            ]

    async def __call__(self, request: Request) -> Response:
        self._start_following()
        reply = await self.gate.answer(request.headers.get("authorization"),
                                       lambda: self._forward(request))  # fmt: skip
        return Response(reply.body, reply.status, headers=reply.headers or None,
                        media_type=reply.media_type)  # fmt: skip

    async def _forward(self, request: Request) -> Reply:
        """The owner's request: a group's answer, or the router's own 503."""
        routing = self._routing
        if routing is None:
            return Reply(503, error_body(f"{self.model} has no replica groups yet"))
        plan, groups = routing
        first, fallback = route_camera(plan, request.headers.get(CAMERA_HEADER))
        order = self._health.order(fallback_order(plan, first), time.monotonic())
        forwarded = Forwarded(request.url.path, request.method, tuple(request.headers.items()),
                              await request.body())  # fmt: skip
        for name in order:
            timeout_s = GROUP_TIMEOUT_S if name != order[-1] else LAST_GROUP_TIMEOUT_S
            try:
                answer: Answer = await asyncio.wait_for(
                    groups[name].forwarded.remote(forwarded), timeout_s
                )
            except Exception as exc:  # its node lost: the next group answers
                log.info("group %s of %s did not answer (%s)", name, self.model, exc)
                self._health.failed(name, time.monotonic())
                continue
            self._health.answered(name)
            headers = {**dict(answer.header_items), GROUP_HEADER: name,
                       FALLBACK_HEADER: "1" if fallback or name != first else "0"}  # fmt: skip
            return Reply(answer.status, answer.content, headers, media_type=None)
        return Reply(503, error_body(f"no replica group of {self.model} answered"))


def group_app(model: str, group: ReplicaGroup) -> str:
    """The Serve application of one replica group of ``model`` (no HTTP route: only the
    router calls it), ``groups-<model>@<variant>@<node>``; a model name has no ``@``, so
    :func:`group_apps_prefix` picks out one model's groups."""
    return group_apps_prefix(model) + group.name


def group_apps_prefix(model: str) -> str:
    return f"{GROUP_APP_PREFIX}{model}@"


def group_deployment(group: ReplicaGroup) -> str:
    """The Serve deployment name of a replica group (in its own application)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in group.name)
    return f"group-{safe}"
