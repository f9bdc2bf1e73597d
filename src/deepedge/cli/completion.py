"""Shell completion of what a running service knows: job ids and deployment names.

The service is the one the command line names so far (``--url``/``--token``, the
environment, the context), asked with a short time limit. Offline, without a token, or on
any error nothing is offered: a TAB never prints an error into the user's command line.
"""

from __future__ import annotations

from typing import Any

import typer

from deepedge.cli.client import Service, resolve
from deepedge.cli.render import SHORT_ID

COMPLETION_TIMEOUT_S = 1.0  # a TAB that waits longer than this feels broken


def _ask(ctx: typer.Context, path: str, **params: Any) -> Any:
    """The service's answer to ``GET path``, or None when it cannot be had quickly."""
    try:
        target = resolve(ctx.params.get("url"), ctx.params.get("token"))
        if target.token is None:
            return None
        service = Service(target.url, target.token, target.url_source, COMPLETION_TIMEOUT_S)
        return service.get(path, **params)
    except Exception:  # completion fails silently, whatever the cause
        return None


def complete_job_ids(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """The tenant's newest jobs whose id starts with ``incomplete``: short ids (any unique
    prefix is accepted back), the whole id once more is typed than a short id has."""
    page = _ask(ctx, "/v1/jobs", limit=100)
    jobs = page.get("jobs", []) if isinstance(page, dict) else []
    typed = incomplete.lower()
    width = SHORT_ID if len(typed) < SHORT_ID else None
    return [
        (str(j["id"])[:width], f"{j.get('name')} ({j.get('status')})")
        for j in jobs
        if isinstance(j, dict) and str(j.get("id", "")).startswith(typed)
    ]


def complete_deployments(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """The tenant's deployments whose name starts with ``incomplete``."""
    body = _ask(ctx, "/v1/deployments")
    listed = body.get("deployments", []) if isinstance(body, dict) else []
    return [
        (str(d["name"]), str(d.get("status", "")))
        for d in listed
        if isinstance(d, dict) and str(d.get("name", "")).startswith(incomplete)
    ]
