"""The ``Host`` header checked against the names the service answers to.

A web page on any site can make a browser send requests to ``127.0.0.1:8750`` under a name
it controls whose address it switched to loopback (DNS rebinding): the browser then treats
the API as that site's own. The service answers only requests naming it: the loopback
names always, and the names the operator configured (``deepedge serve --allowed-host``);
any other ``Host`` gets 400 with one JSON line. Requests on the API's Unix socket (from
sandboxed jobs) carry whatever name their client chose and are answered as loopback ones.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def host_name(header: str) -> str:
    """``name`` of ``name:port`` (``[v6]:port`` keeps its brackets), lower case."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostCheckMiddleware:
    """Pure ASGI, like the other middlewares: responses pass through unbuffered."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = LOOPBACK_NAMES | {host_name(a) for a in allowed if a}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"} or self._unix(scope):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        name = host_name(headers.get(b"host", b"").decode("latin-1"))
        if name in self.allowed:
            await self.app(scope, receive, send)
            return
        body = {
            "error": "invalid_host",
            "message": f"Host {name or '(none)'!r} is not a name of this service "
            "(deepedge serve --allowed-host NAME)",
            "field": "Host",
        }
        await JSONResponse(body, status_code=400)(scope, receive, send)

    @staticmethod
    def _unix(scope: Scope) -> bool:
        return scope.get("server") is None  # uvicorn: a Unix socket has no (host, port)
