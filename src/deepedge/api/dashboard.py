"""The operator's dashboard: one page served by the API itself (``GET /dashboard``).

The page is static (``api/static/``): HTML with its stylesheet inlined, and its script as
ES modules, one per view or concept (``GET /dashboard/static/NAME.js``, only the names of
:data:`MODULES`); no external library or CDN, no build step, charts drawn as inline SVG. It
holds no tenant data: the operator logs in with a tenant token, which the page keeps in
``sessionStorage`` and sends as ``Authorization: Bearer`` to the same ``/v1`` JSON API as the
CLI, so everything it shows is tenant-scoped by the API. A Content-Security-Policy lets only
same-origin scripts run (``script-src 'self'``: the modules, served as JavaScript with
``nosniff``, so no JSON answer of the API can be run as a script), only the page's own inline
style (by its SHA-256), and only same-origin requests leave it.

Its data comes from the job, deployment and node routers and from ``GET /v1/host``
(:mod:`deepedge.api.host`); a finished job's decision from ``GET /v1/jobs/{id}/result``.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request, Response

from deepedge.core.errors import NotFoundError

DASHBOARD_PATH = "/dashboard"
STATIC_PATH = DASHBOARD_PATH + "/static"
ENTRY = "dashboard.js"
# Every file the page may load: the entry and the modules it imports (api/static/).
MODULES = (
    ENTRY, "allocations.js", "api.js", "chart.js", "curve.js", "deployments.js", "dom.js",
    "format.js", "health.js", "jobs.js", "nodes.js", "results.js", "router.js", "session.js",
    "state.js",
)  # fmt: skip
_STYLE_SLOT = "/* dashboard.css */"
_MODULES_SLOT = "<!-- modules -->"
JAVASCRIPT = "text/javascript; charset=utf-8"


@dataclass(frozen=True)
class Asset:
    """A file as served, and the headers that go with it."""

    body: bytes
    etag: str
    media_type: str
    csp: str | None = None


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _static(name: str) -> str:
    return (resources.files("deepedge.api") / "static" / name).read_text(encoding="utf-8")


@cache
def page() -> Asset:
    """The HTML with its stylesheet inlined and every module preloaded (once per process)."""
    html, css = _static("dashboard.html"), _static("dashboard.css")
    script = f'<script type="module" src="{STATIC_PATH}/{ENTRY}"></script>'
    if _STYLE_SLOT not in html or _MODULES_SLOT not in html or script not in html:
        raise RuntimeError("dashboard.html lost its style slot, module slot or entry script")
    preload = "\n".join(f'<link rel="modulepreload" href="{STATIC_PATH}/{n}">' for n in MODULES)
    html = html.replace(_STYLE_SLOT, css).replace(_MODULES_SLOT, preload)
    csp = (
        f"default-src 'none'; script-src 'self'; style-src '{_sha256(css)}'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    body = html.encode("utf-8")
    return Asset(body, _etag(body), "text/html; charset=utf-8", csp)


@cache
def module(name: str) -> Asset:
    """One of the page's modules (once per process); NotFoundError for any other name."""
    if name not in MODULES:
        raise NotFoundError(f"no dashboard file {name}")
    body = _static(name).encode("utf-8")
    return Asset(body, _etag(body), JAVASCRIPT)


def _answer(request: Request, asset: Asset) -> Response:
    headers = {
        "ETag": asset.etag,
        "Cache-Control": "no-cache",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    if asset.csp is not None:
        headers["Content-Security-Policy"] = asset.csp
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


router = APIRouter()


@router.get(DASHBOARD_PATH, include_in_schema=False)
def dashboard(request: Request) -> Response:
    return _answer(request, page())


@router.get(STATIC_PATH + "/{name}", include_in_schema=False)
def dashboard_module(request: Request, name: str) -> Response:
    return _answer(request, module(name))
