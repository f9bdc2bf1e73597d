"""The client side of every command that talks to a running service.

Where the service is and which tenant speaks: ``--url`` / ``DEEPEDGE_URL`` (``http://...``,
or ``unix:/path`` as a sandboxed job with ``api_access`` has it) and ``--token``
/ ``DEEPEDGE_TOKEN``, else the context that ``deepedge serve`` or ``deepedge demo --site``
wrote (:mod:`deepedge.cli.context`), else ``http://127.0.0.1:8750`` and no token (refused
before any request, with what to do). An error answer becomes the matching typed error, hence
the same one-line message and exit code as any other deepedge command. Job ids may be given
as any unique prefix: the API resolves them.

Requests go through the standard library's ``http.client``: a command that talks to the
service starts in a fraction of the time an HTTP library's import takes (httpx pulls in
its async back ends, trio among them). A reference given on the command line (a job id,
a deployment name, a token id) is checked here and sent as one quoted path segment.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote, urlencode, urlsplit

import typer

from deepedge.cli.context import (
    CONTEXT_ENV,
    TOKEN_ENV,
    URL_ENV,
    Context,
    context_path,
    read_context,
)
from deepedge.core import errors

if TYPE_CHECKING:
    import http.client

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
# An answer without deepedge's error document (a proxy's, a route the API does not have).
_BY_STATUS: dict[int, type[errors.DeepEdgeError]] = {
    400: errors.InvalidInputError, 401: errors.UnauthorizedError, 403: errors.ForbiddenError,
    404: errors.NotFoundError, 405: errors.InvalidInputError, 409: errors.ConflictError,
    413: errors.RequestTooLargeError, 414: errors.InvalidInputError,
    422: errors.InvalidInputError, 429: errors.QuotaExceededError,
    502: errors.DependencyUnavailableError, 503: errors.DependencyUnavailableError,
}  # fmt: skip
_REFERENCES = {
    # what an argument names -> (the characters it may have, what to say when it has others)
    "job": (r"[0-9A-Fa-f]{1,32}", "a job id or a unique prefix of it (hex digits)"),
    "deployment": (
        r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
        "a deployment name or a unique prefix of its id (letters, digits, . _ -)",
    ),
    "token": (r"[0-9A-Fa-f]{1,32}", "a token id or a unique prefix of it (hex digits)"),
    "key": (r"[0-9A-Za-z_]{1,32}", "an inference key's id or its shown prefix (dpk_...)"),
}
_TOKEN_CHARS = re.compile(r"[!-~]{1,512}")  # a token is printable ASCII (dpe_...)


def reference(value: str, kind: str) -> str:
    """``value`` checked as a reference of ``kind`` (``job``, ``deployment``, ``token``,
    ``key``): one line naming what was expected otherwise (exit status 2), before any
    request."""
    pattern, expected = _REFERENCES[kind]
    stripped = value.strip()
    if re.fullmatch(pattern, stripped) is None:
        shown = "nothing" if not stripped else repr(stripped[:40] + "..." * (len(stripped) > 40))
        raise errors.InvalidInputError(f"{kind}: expected {expected}, got {shown}", field=kind)
    return stripped


def segment(value: str) -> str:
    """One path segment of a URL (a name the service gave, or a checked reference)."""
    return quote(value, safe="")


def raise_for(status: int, body: bytes) -> None:
    """The typed error of an error answer (nothing for a success)."""
    if status < 400:
        return
    text = body.decode("utf-8", "replace")
    try:
        document = json.loads(text)
    except ValueError:
        document = {"message": text[:300] or f"HTTP {status}"}
    if not isinstance(document, dict):
        document = {"message": str(document)[:300]}
    cls = _BY_CODE.get(str(document.get("error"))) or _BY_STATUS.get(status, errors.DeepEdgeError)
    message = document.get("message") or document.get("detail") or f"HTTP {status}"
    raise cls(str(message))


def address(url: str, source: str) -> tuple[str, str, int | None, str]:
    """``http(s)://host[:port][/prefix]`` as (scheme, host, port, prefix); anything else is
    refused, naming where the address came from."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise errors.InvalidInputError(
            f"the service address {url[:80]!r} ({source}) is not http://HOST:PORT, "
            "https://HOST:PORT or unix:/PATH",
            field="url",
        )
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def _unix_connection(path: str, timeout: float | None) -> http.client.HTTPConnection:
    """An ``http.client.HTTPConnection`` over the API's Unix socket (as a sandboxed job with
    ``api_access`` sees the service)."""
    import http.client

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
            self.sock = sock

    return UnixConnection("localhost", timeout=timeout)


@dataclass(frozen=True)
class Service:
    """A running service and the tenant token the commands speak with."""

    url: str
    token: str
    url_source: str  # where the URL came from, for the "cannot reach" message
    timeout_s: float = 30.0  # of one request (a stream has none)

    def _connection(self, timeout: float | None) -> tuple[http.client.HTTPConnection, str]:
        """A connection to ``url`` and the path prefix of its requests."""
        import http.client

        if self.url.startswith("unix:"):
            return _unix_connection(self.url.removeprefix("unix:"), timeout), ""
        scheme, host, port, prefix = address(self.url, self.url_source)
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return cls(host, port, timeout=timeout), prefix

    def check_reachable(self, timeout_s: float = 5.0) -> None:
        """Raise the "cannot reach" error unless something listens at ``url``."""
        connection, _ = self._connection(timeout_s)
        try:
            connection.connect()
        except OSError as exc:
            raise self.unreachable(exc) from exc
        finally:
            connection.close()

    def unreachable(self, exc: BaseException) -> errors.DependencyUnavailableError:
        hint = (
            "start one with `deepedge serve` (or `deepedge demo --site`), or point the CLI at "
            f"it with --url / {URL_ENV}"
        )
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return errors.DependencyUnavailableError(
            f"cannot reach {self.url} ({self.url_source}): {reason}; {hint}"
        )

    @contextmanager
    def _answer(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
    ) -> Iterator[http.client.HTTPResponse]:
        """The answer to one request, its status checked (an error answer is raised)."""
        import http.client

        query = {k: v for k, v in (params or {}).items() if v is not None}
        sent = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                **(headers or {})}  # fmt: skip
        payload = None
        if json_body is not None:
            payload = json.dumps(json_body).encode()
            sent["Content-Type"] = "application/json"
        connection, prefix = self._connection(None if stream else self.timeout_s)
        target = prefix + path + (f"?{urlencode(query)}" if query else "")
        try:
            try:
                connection.request(method, target, body=payload, headers=sent)
                response = connection.getresponse()
                if response.status >= 400:
                    raise_for(response.status, response.read())
            except (OSError, http.client.HTTPException) as exc:
                raise self.unreachable(exc) from exc
            yield response
        finally:
            connection.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request (``params=``, ``json=``, ``headers=``); the answer's JSON (``{}`` for
        an empty one)."""
        import http.client

        with self._answer(
            method, path, kwargs.get("params"), kwargs.get("json"), kwargs.get("headers")
        ) as response:
            try:
                content = response.read()
            except (OSError, http.client.HTTPException) as exc:
                raise self.unreachable(exc) from exc
        if not content:
            return {}
        try:
            return json.loads(content)
        except ValueError as exc:
            raise errors.DependencyUnavailableError(
                f"{self.url} answered {path} with something that is not JSON: is it a "
                "deepedge service?"
            ) from exc

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params)

    @contextmanager
    def stream(self, path: str, **params: Any) -> Iterator[Chunks]:
        """A streaming GET: the answer's bytes as they come (no time limit), and its
        headers."""
        with self._answer("GET", path, params, stream=True) as response:
            yield Chunks(self, response)


class Chunks:
    """An answer's bytes as they come (iterate), and its ``headers`` (names lowercase)."""

    def __init__(self, service: Service, response: http.client.HTTPResponse) -> None:
        self._service, self._response = service, response
        self.headers = {name.lower(): value for name, value in response.getheaders()}

    def __iter__(self) -> Iterator[bytes]:
        import http.client

        try:
            while chunk := self._response.read1(65536):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise self._service.unreachable(exc) from exc


@dataclass(frozen=True)
class Target:
    """Where the commands go and with which token, before anything is asked of it."""

    url: str
    url_source: str
    token: str | None
    context: Context | None


def resolve(url: str | None, token: str | None) -> Target:
    """The service the options name, completed from the context (module docstring)."""
    context = read_context() if not url or not token else None
    if url:
        chosen, source = url.strip().rstrip("/"), f"--url or {URL_ENV}"
    elif context is not None:
        chosen, source = context.url.rstrip("/"), f"the context {context_path()}"
    else:
        chosen, source = DEFAULT_URL, f"the default; no --url, {URL_ENV} or context"
    if not token and context is not None and context.url.rstrip("/") == chosen:
        token = context.token()
    if token and not _TOKEN_CHARS.fullmatch(token):
        raise errors.InvalidInputError(
            "the token has characters no deepedge token has (printable ASCII only)",
            field="token",
        )
    return Target(chosen, source, token or None, context)


def connect(url: str | None, token: str | None) -> Service:
    """The service the options name, completed from the context (module docstring)."""
    return service_of(resolve(url, token))


def service_of(target: Target) -> Service:
    """The service to talk to. Without a token for it: "cannot reach" when nothing listens
    there, else what to do to get one (no request is sent without a token)."""
    if not target.url.startswith("unix:"):
        address(target.url, target.url_source)  # a malformed address: refused at once
    if target.token is None:
        Service(target.url, "", target.url_source).check_reachable()
        raise errors.UnauthorizedError(
            f"no tenant token for {target.url}: give --token or set {TOKEN_ENV} "
            "(`deepedge tenants create NAME` prints one), or use the context that "
            f"`deepedge serve` / `deepedge demo --site` write ({CONTEXT_ENV} to move it)"
        )
    return Service(target.url, target.token, target.url_source)


def write_bytes(chunks: Iterable[bytes]) -> int:
    """Copy a stream to stdout as it comes; the bytes copied."""
    size = 0
    for chunk in chunks:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        size += len(chunk)
    return size
