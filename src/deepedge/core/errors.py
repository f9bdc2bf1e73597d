"""Typed errors of deepedge, each with exactly one CLI exit code and one HTTP status.

The CLI (``deepedge.cli``) and the API (``deepedge.api``) map errors in one place each,
reading :attr:`DeepEdgeError.exit_code` and :attr:`DeepEdgeError.http_status`; library code
raises these and never renders them.

Exit codes: 0 success, 1 internal failure, 2 bad input, 3 infeasible problem,
4 not found, 5 conflict / illegal state, 6 quota exceeded, 7 unauthorised,
8 a dependency (external tool, service) is unavailable, 9 a run failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the command line's client commands start without loading pydantic
    from pydantic import ValidationError


class DeepEdgeError(Exception):
    """Base of every error deepedge raises on purpose."""

    exit_code: ClassVar[int] = 1
    http_status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields: dict[str, Any] = fields

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.fields}


class InvalidInputError(DeepEdgeError):
    """The input document or argument is malformed; ``field`` names the culprit."""

    exit_code = 2
    http_status = 422
    code = "invalid_input"

    def __init__(self, message: str, field: str | None = None, **fields: Any) -> None:
        super().__init__(message, field=field, **fields)
        self.field = field


class TenantCodeError(InvalidInputError):
    """A tenant's code, run for the service in its sandbox (checking its workload), failed
    or ran out of time: the tenant's input is at fault."""

    code = "tenant_code_failed"


class UnsafeModelError(TenantCodeError):
    """A model a tenant gave (an export, an upload) is not a graph the service may run: an
    operator outside the allowed set, data outside the file, a shape only known at run
    time, a size past the bounds. ``reason`` names the rule it broke."""

    code = "unsafe_model"


class RequestTooLargeError(InvalidInputError):
    """A request body over the service's limit; bad input, refused before it is read."""

    http_status = 413
    code = "request_too_large"


class BadRequestError(InvalidInputError):
    """A request the inference protocol refuses (a wrong tensor name, shape, datatype or
    body): HTTP 400, the Open Inference Protocol's status for a malformed request."""

    http_status = 400
    code = "bad_request"


class MethodNotAllowedError(InvalidInputError):
    """A known path asked with a method it does not take (``allowed`` lists those it
    does): HTTP 405."""

    http_status = 405
    code = "method_not_allowed"

    def __init__(self, message: str, allowed: tuple[str, ...], **fields: Any) -> None:
        super().__init__(message, allowed=list(allowed), **fields)
        self.allowed = allowed


class UnsupportedMediaTypeError(InvalidInputError):
    """A request body in an encoding or format the endpoint does not read (an unknown
    ``Content-Encoding``): HTTP 415."""

    http_status = 415
    code = "unsupported_media_type"


class InfeasibleError(DeepEdgeError):
    """The problem is well-formed but has no feasible solution; ``reasons`` say why."""

    exit_code = 3
    http_status = 409
    code = "infeasible"

    def __init__(self, message: str, reasons: list[str] | None = None, **fields: Any) -> None:
        super().__init__(message, reasons=list(reasons or []), **fields)
        self.reasons = list(reasons or [])


class NotFoundError(DeepEdgeError):
    exit_code = 4
    http_status = 404
    code = "not_found"


class ConflictError(DeepEdgeError):
    """An operation is illegal in the current state (for example an illegal transition)."""

    exit_code = 5
    http_status = 409
    code = "conflict"


class IllegalTransitionError(ConflictError):
    code = "illegal_transition"


class UidRangeClaimedError(ConflictError):
    """Another deepedge service on this host holds the sandbox uids this one's tenants
    have (``range``, ``claimed_by``: its data folder); sharing them would share the
    kernel's per-user limits."""

    code = "uid_range_claimed"


class QuotaExceededError(DeepEdgeError):
    exit_code = 6
    http_status = 429
    code = "quota_exceeded"


class UnauthorizedError(DeepEdgeError):
    exit_code = 7
    http_status = 401
    code = "unauthorized"


class ForbiddenError(UnauthorizedError):
    """A valid token that may not do this (a job's token minting tokens, a tenant's
    reading every tenant's metrics)."""

    http_status = 403
    code = "forbidden"


class DependencyUnavailableError(DeepEdgeError):
    """An external tool or service deepedge needs (stress-ng, PostgreSQL, Ray) is missing."""

    exit_code = 8
    http_status = 503
    code = "dependency_unavailable"


class IngressUnavailableError(DependencyUnavailableError):
    """The data plane's own HTTP ingress (HAProxy on the data plane's address, Ray Serve
    behind it on loopback) cannot run: no HAProxy, its address taken, or a Serve already
    listening off loopback, where its own routes would be open; ``address`` names the
    address when one is known."""

    code = "ingress_unavailable"


class DataPlaneStartingError(DependencyUnavailableError):
    """The data plane is starting: a served model's application does not take requests
    yet (Serve's applications are being deployed). A client tries again after
    ``retry_after_s`` (the answer's ``Retry-After``)."""

    code = "data_plane_starting"

    def __init__(self, message: str, retry_after_s: int = 1, **fields: Any) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **fields)
        self.retry_after_s = retry_after_s


class RunFailedError(DeepEdgeError):
    """A training, profiling or learner run failed; ``cause`` tells the user what to do."""

    exit_code = 9
    http_status = 500
    code = "run_failed"


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the first offending field, e.g. ``workers.0.mem_mb: ...``."""
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ())) or "<document>"
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {first.get('msg', 'invalid')}{extra}"
