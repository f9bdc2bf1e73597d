"""The one place where errors become HTTP responses.

* :class:`~deepedge.core.errors.DeepEdgeError` -> its ``http_status`` and ``to_dict()`` body.
* Request validation (body, path, query, headers) -> 422 naming the first offending field.
* Anything else -> 500 with an opaque message (the details go to the log, not the caller).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from deepedge.core.errors import DeepEdgeError, UnauthorizedError

log = logging.getLogger(__name__)

# Where FastAPI puts a parameter; dropped from field names shown to users.
_SOURCES = {"body", "query", "path", "header", "cookie"}


def _field_of(loc: tuple[object, ...] | list[object]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in _SOURCES:
        parts = parts[1:]
    # Union branches appear as class names (``spec.CommandSpec.argv``); users never see them.
    parts = [p for p in parts if p not in {"CommandSpec", "DocumentSpec"}]
    return ".".join(parts) or "<body>"


def validation_body(errors: list[dict[str, object]]) -> dict[str, object]:
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    field = _field_of(first.get("loc", ()))  # type: ignore[arg-type]
    message = str(first.get("msg", "invalid"))
    if first.get("type") == "json_invalid":
        field, message = "<body>", "the request body is not valid JSON"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    details = [
        {"field": _field_of(e.get("loc", ())), "message": str(e.get("msg", ""))}  # type: ignore[arg-type]
        for e in errors[:20]
    ]
    return {
        "error": "invalid_input",
        "message": f"{field}: {message}{more}",
        "field": field,
        "details": details,
    }


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(DeepEdgeError)
    async def _typed(_request: Request, exc: DeepEdgeError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else None
        return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(validation_body(list(exc.errors())), status_code=422)

    @app.exception_handler(ValidationError)
    async def _model_invalid(_request: Request, exc: ValidationError) -> JSONResponse:
        return JSONResponse(validation_body(list(exc.errors())), status_code=422)  # type: ignore[arg-type]

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": "http", "message": str(exc.detail)},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            {"error": "internal", "message": "internal error; the service log has the details"},
            status_code=500,
        )
