"""The one error-to-HTTP mapping: each typed error keeps its status and its body."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from deepedge.api.errors import install_error_handlers
from deepedge.core import errors


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.InvalidInputError("bad", field="x"), 422),
        (errors.RequestTooLargeError("huge", field="<body>"), 413),
        (errors.InfeasibleError("no"), 409),
        (errors.NotFoundError("gone"), 404),
        (errors.ConflictError("busy"), 409),
        (errors.IllegalTransitionError("no edge"), 409),
        (errors.QuotaExceededError("too many"), 429),
        (errors.UnauthorizedError("who"), 401),
        (errors.DependencyUnavailableError("db down"), 503),
        (errors.RunFailedError("crashed"), 500),
        (RuntimeError("secret detail"), 500),
    ],
)
def test_errors_map_to_their_status(error: Exception, status: int) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise error

    response = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert response.status_code == status
    body = response.json()
    if isinstance(error, errors.DeepEdgeError):
        assert body["error"] == error.code and body["message"] == error.message
    else:
        assert "secret detail" not in response.text
