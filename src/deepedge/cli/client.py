"""The client side of every command that talks to a running service.

Where the service is and which tenant speaks: ``--url`` / ``DEEPEDGE_URL`` (``http://...``,
or ``unix:/path`` as a sandboxed job with ``api_access`` has it) and ``--token``
/ ``DEEPEDGE_TOKEN``, else the context that ``deepedge serve`` or ``deepedge demo --site``
wrote (:mod:`deepedge.cli.context`), else ``http://127.0.0.1:8750`` and no token (refused
before any request, with what to do). An error answer becomes the matching typed error, hence
the same one-line message and exit code as any other deepedge command. Job ids may be given
as any unique prefix: the API resolves them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from deepedge.cli.context import CONTEXT_ENV, TOKEN_ENV, URL_ENV, context_path, read_context
from deepedge.core import errors

DEFAULT_URL = "http://127.0.0.1:8750"
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar=URL_ENV,
        show_default=False,
        help=f"service address [default: the context's, else {DEFAULT_URL}]",
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=TOKEN_ENV,
        show_default=False,
        help="tenant token [default: the one the context names]",
    ),
]

_BY_CODE: dict[str, type[errors.DeepEdgeError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidInputError,
        errors.TenantCodeError,
        errors.ForbiddenError,
        errors.RequestTooLargeError,
        errors.InfeasibleError,
        errors.NotFoundError,
        errors.ConflictError,
        errors.IllegalTransitionError,
        errors.QuotaExceededError,
        errors.UnauthorizedError,
        errors.DependencyUnavailableError,
        errors.RunFailedError,
    )
}


def raise_for(response: Any) -> None:
    """The typed error of an error answer (nothing for a success)."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text[:300]}
    if not isinstance(body, dict):
        body = {"message": str(body)[:300]}
    cls = _BY_CODE.get(str(body.get("error")), errors.DeepEdgeError)
    raise cls(str(body.get("message", f"HTTP {response.status_code}")))


@dataclass(frozen=True)
class Service:
    """A running service and the tenant token the commands speak with."""

    url: str
    token: str
    url_source: str  # where the URL came from, for the "cannot reach" message

    def _client(self, timeout: float | None = 30.0) -> Any:
        """An HTTP client of ``url``: ``http(s)://host:port``, or ``unix:/path/api.sock``
        (the API's socket, as a sandboxed job with ``api_access`` sees it)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"}
        if self.url.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=self.url.removeprefix("unix:"))
            return httpx.Client(transport=transport, base_url="http://localhost",
                                headers=headers, timeout=timeout, trust_env=False)  # fmt: skip
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def unreachable(self, exc: Exception) -> errors.DependencyUnavailableError:
        hint = (
            "start one with `deepedge serve` (or `deepedge demo --site`), or point the CLI at "
            f"it with --url / {URL_ENV}"
        )
        return errors.DependencyUnavailableError(
            f"cannot reach the service at {self.url} ({self.url_source}): {exc}; {hint}"
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the answer's JSON (``{}`` for an empty one)."""
        import httpx

        try:
            with self._client() as client:
                response = client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from exc
        raise_for(response)
        return response.json() if response.content else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params={k: v for k, v in params.items() if v is not None})

    @contextmanager
    def stream(self, path: str, **params: Any) -> Iterator[Iterator[bytes]]:
        """A streaming GET: the answer's bytes as they come (no time limit)."""
        import httpx

        try:
            with (
                self._client(timeout=None) as client,
                client.stream("GET", path, params=params) as response,
            ):
                if response.status_code >= 400:
                    response.read()
                    raise_for(response)
                yield response.iter_bytes()
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from exc


def connect(url: str | None, token: str | None) -> Service:
    """The service the options name, completed from the context (module docstring)."""
    context = read_context() if url is None or token is None else None
    if url:
        chosen, source = url.rstrip("/"), f"--url or {URL_ENV}"
    elif context is not None:
        chosen, source = context.url.rstrip("/"), f"the context {context_path()}"
    else:
        chosen, source = DEFAULT_URL, f"the default; no --url, {URL_ENV} or context"
    if not token and context is not None and context.url.rstrip("/") == chosen:
        token = context.token()
    if not token:
        raise errors.UnauthorizedError(
            f"no tenant token for {chosen}: give --token or set {TOKEN_ENV} "
            "(`deepedge tenants create NAME` prints one), or use the context that "
            f"`deepedge serve` / `deepedge demo --site` write ({CONTEXT_ENV} to move it)"
        )
    return Service(chosen, token, source)


def write_bytes(chunks: Iterator[bytes]) -> None:
    """Copy a stream to stdout as it comes."""
    for chunk in chunks:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
