"""``deepedge tenants ...`` (the operator's, on the service's store) and ``deepedge tokens
...`` (a tenant's, through the API).

A tenant is created with its quotas, the host folders its sandboxes may read
(``--grant``) and its first token; the operator lists tenants, grants folders, lists and
revokes any token, and mints operator tokens (for ``/metrics``). A tenant lists, mints and
revokes its own tokens through the API: a revoked token is refused from the next request
on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli.app import app, check_number, echo_json, run_guarded
from deepedge.cli.jobs import DEFAULT_URL, DataDir, DbUrl, Token, Url, _call
from deepedge.core import errors

tenants_app = typer.Typer(
    help="Manage tenants of a service's store (the operator, on the service's host).",
    no_args_is_help=True,
)
tokens_app = typer.Typer(
    help="Your tenant's API tokens on a running service.", no_args_is_help=True
)
app.add_typer(tenants_app, name="tenants")
app.add_typer(tokens_app, name="tokens")


def _store(data_dir: Path, db: str | None) -> Any:
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore

    settings = ServiceSettings(data_dir=data_dir, database_url=db)
    data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.url)
    store.migrate()
    return store


def _tenant_view(tenant: Any) -> dict[str, Any]:
    return {"tenant": tenant.name, "id": tenant.id, "sandbox_uid": tenant.uid,
            "grants": list(tenant.grants), "max_active_jobs": tenant.max_active_jobs,
            "max_queued_jobs": tenant.max_queued_jobs, "max_cores": tenant.max_cores,
            "max_gpus": tenant.max_gpus}  # fmt: skip


def _checked_grants(paths: list[Path], data_dir: Path) -> list[str]:
    from deepedge.service.sandbox import grant_problem

    grants = [str(p.absolute()) for p in paths]
    for grant in grants:
        problem = grant_problem(grant, data_dir.absolute())
        if problem is not None:
            raise errors.InvalidInputError(f"--grant {problem}", field="grant")
    return grants


Grant = Annotated[
    list[Path] | None,
    typer.Option(
        "--grant",
        help="a host folder the tenant's sandboxes may read (its workloads' code and data); "
        "repeatable",
    ),
]


@tenants_app.command("create")
def tenants_create(
    name: str,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    max_active_jobs: int = 4,
    max_queued_jobs: int = 1000,
    max_cores: float = 8.0,
    max_gpus: int = 0,
    grant: Grant = None,
) -> None:
    """Create a tenant and print its token (shown once; only its hash is stored)."""
    from deepedge.service.tenants import new_token

    def _create() -> dict[str, Any]:
        check_number(max_cores, "--max-cores", gt=0.0, le=100_000.0)
        counts = {"--max-active-jobs": max_active_jobs, "--max-gpus": max_gpus,
                  "--max-queued-jobs": max_queued_jobs}  # fmt: skip
        for flag, value in counts.items():
            check_number(value, flag, ge=0.0, le=1_000_000.0)
        grants = _checked_grants(grant or [], data_dir)
        store = _store(data_dir, db)
        token = new_token()
        try:
            tenant = store.create_tenant(
                name, token, max_active_jobs=max_active_jobs, max_queued_jobs=max_queued_jobs,
                max_cores=max_cores, max_gpus=max_gpus, grants=grants,
            )  # fmt: skip
        finally:
            store.dispose()
        return {**_tenant_view(tenant), "token": token}

    echo_json(run_guarded(_create))


@tenants_app.command("list")
def tenants_list(data_dir: DataDir = Path("deepedge-data"), db: DbUrl = None) -> None:
    """Every tenant with its sandbox user, grants and quotas (never a token)."""

    def _list() -> list[dict[str, Any]]:
        store = _store(data_dir, db)
        try:
            return [_tenant_view(t) for t in store.tenants()]
        finally:
            store.dispose()

    echo_json(run_guarded(_list))


@tenants_app.command("grant")
def tenants_grant(
    name: str,
    grant: Grant = None,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    replace: Annotated[bool, typer.Option(help="the grants become exactly these")] = False,
) -> None:
    """Let a tenant's sandboxes read host folders (its code and data), read-only."""

    def _grant() -> dict[str, Any]:
        grants = _checked_grants(grant or [], data_dir)
        store = _store(data_dir, db)
        try:
            tenant = store.tenant_named(name)
            kept = [] if replace else [g for g in tenant.grants if g not in grants]
            return _tenant_view(store.set_grants(tenant.id, [*kept, *grants]))
        finally:
            store.dispose()

    echo_json(run_guarded(_grant))


@tenants_app.command("tokens")
def tenants_tokens(name: str, data_dir: DataDir = Path("deepedge-data"), db: DbUrl = None) -> None:
    """A tenant's tokens (ids, roles, labels, revocations; never the secrets)."""

    def _tokens() -> list[dict[str, Any]]:
        store = _store(data_dir, db)
        try:
            return [_token_view(t) for t in store.tokens(store.tenant_named(name).id)]
        finally:
            store.dispose()

    echo_json(run_guarded(_tokens))


@tenants_app.command("revoke-token")
def tenants_revoke_token(
    token_id: str, data_dir: DataDir = Path("deepedge-data"), db: DbUrl = None
) -> None:
    """Revoke any token by its id (a tenant's, a job's or an operator's): refused by the
    running service from its next request on."""

    def _revoke() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            return _token_view(store.revoke_token(token_id, None))
        finally:
            store.dispose()

    echo_json(run_guarded(_revoke))


@tenants_app.command("operator-token")
def tenants_operator_token(
    label: str = "operator", data_dir: DataDir = Path("deepedge-data"), db: DbUrl = None
) -> None:
    """Mint an operator token (reads /metrics, which counts every tenant's jobs)."""
    from deepedge.service.tenants import TokenRole

    def _mint() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            record, secret = store.create_token(TokenRole.OPERATOR, tenant_id=None, label=label)
        finally:
            store.dispose()
        return {**_token_view(record), "token": secret}

    echo_json(run_guarded(_mint))


def _token_view(record: Any) -> dict[str, Any]:
    return {"id": record.id, "role": str(record.role), "label": record.label,
            "job_id": record.job_id, "created_at": record.created_at,
            "revoked_at": record.revoked_at}  # fmt: skip


@tokens_app.command("list")
def tokens_list(url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Your tenant's tokens, revoked ones included (never the secrets)."""
    echo_json(run_guarded(lambda: _call(url, token, "GET", "/v1/tokens")))


@tokens_app.command("create")
def tokens_create(label: str = "api", url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Mint another token of your tenant (printed once)."""
    body = {"label": label}
    echo_json(run_guarded(lambda: _call(url, token, "POST", "/v1/tokens", json=body)))


@tokens_app.command("revoke")
def tokens_revoke(token_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Revoke one of your tenant's tokens: refused from the next request on."""
    echo_json(run_guarded(lambda: _call(url, token, "DELETE", f"/v1/tokens/{token_id}")))
