"""The operator's ``deepedge tenants list|update|grant|tokens|revoke-token|operator-token``
(on the service's store; ``tenants create`` is :mod:`deepedge.cli.service`'s) and a
tenant's ``deepedge tokens list|create|revoke`` (through the API).

A tenant's sandboxes read only the host folders the operator granted it (``--grant``: its
workloads' code and data); a grant must not hold or lie in the service's data folder. Any
token can be revoked, by its id: the service refuses it from its next request on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import group, run_guarded
from deepedge.cli.client import Token, Url, connect, reference, segment
from deepedge.cli.render import Column, Output, OutputFormat
from deepedge.cli.service import DataDir, DbUrl, checked_grants
from deepedge.core import errors

tenants_app = group("tenants")
tokens_app = group("tokens")

Grant = Annotated[
    list[Path] | None,
    typer.Option("--grant", help="a host folder the tenant's sandboxes may read (repeatable)"),
]
TOKEN_COLUMNS = [
    Column("id", lambda t: render.short_id(t["id"])),
    Column("role", lambda t: t["role"]),
    Column("label", lambda t: t["label"]),
    Column("job", lambda t: render.short_id(t["job_id"])),
    Column("age", lambda t: render.ago(t["created_at"])),
    Column("revoked", lambda t: render.ago(t["revoked_at"]) + " ago" if t["revoked_at"] else None),
    Column("full id", lambda t: t["id"], wide=True),
    Column("created", lambda t: render.clock(t["created_at"]), wide=True),
    Column("revoked at", lambda t: render.clock(t["revoked_at"]), wide=True),
    Column("job id", lambda t: t["job_id"], wide=True),
]
TENANT_COLUMNS = [
    Column("name", lambda t: t["tenant"]),
    Column("sandbox uid", lambda t: t["sandbox_uid"], right=True),
    Column("grants", lambda t: ", ".join(t["grants"]) or "-"),
    Column("jobs", lambda t: t["max_active_jobs"], right=True),
    Column("cores", lambda t: t["max_cores"], right=True),
    Column("gpus", lambda t: t["max_gpus"], right=True),
    Column("disk MB", lambda t: t["max_disk_mb"], right=True),
    Column("id", lambda t: t["id"], wide=True),
]


def unique_token_id(given: str, ids: list[str]) -> str:
    """The one id of ``ids`` that ``given`` (a whole id or a prefix, as tables show) names."""
    prefix = reference(given, "token").lower()
    matches = [i for i in ids if i.startswith(prefix)]
    if not matches:
        raise errors.NotFoundError(f"token {prefix} not found")
    if len(matches) > 1 and prefix not in matches:
        raise errors.InvalidInputError(
            f"token id prefix {prefix!r} is ambiguous ({len(matches)} tokens): give more "
            "characters",
            field="token_id",
        )
    return prefix if prefix in matches else matches[0]


def _store(data_dir: Path, db: str | None) -> Any:
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore

    settings = ServiceSettings(data_dir=data_dir, database_url=db)
    data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(settings.url)
    store.migrate()
    return store


def tenant_view(tenant: Any) -> dict[str, Any]:
    return {"tenant": tenant.name, "id": tenant.id, "sandbox_uid": tenant.uid,
            "grants": list(tenant.grants), "max_active_jobs": tenant.max_active_jobs,
            "max_queued_jobs": tenant.max_queued_jobs, "max_cores": tenant.max_cores,
            "max_gpus": tenant.max_gpus, "max_disk_mb": tenant.max_disk_mb}  # fmt: skip


def token_view(record: Any) -> dict[str, Any]:
    return {"id": record.id, "role": str(record.role), "label": record.label,
            "job_id": record.job_id, "created_at": record.created_at,
            "revoked_at": record.revoked_at}  # fmt: skip


@tenants_app.command("list")
def tenants_list(
    data_dir: DataDir = Path("deepedge-data"), db: DbUrl = None, output: Output = OutputFormat.TABLE
) -> None:
    """Every tenant with its sandbox user, granted folders and quotas (never a token)."""

    def _list() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            return {"tenants": [tenant_view(t) for t in store.tenancy.all()]}
        finally:
            store.dispose()

    body = run_guarded(_list)
    render.emit_list(body, body["tenants"], TENANT_COLUMNS, output,
                     "no tenants yet: deepedge tenants create NAME")  # fmt: skip


@tenants_app.command("update")
def tenants_update(
    name: str,
    max_disk_mb: Annotated[
        int | None,
        typer.Option(min=1, help="disk quota of the tenant's folders (jobs, runs, deployments)"),
    ] = None,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Change a tenant's quotas. A running service applies a smaller disk quota at its next
    count: the tenant's running jobs past it are stopped, its queued ones wait."""

    def _update() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            tenant = store.tenancy.named(name)
            if max_disk_mb is not None:
                tenant = store.tenancy.set_max_disk_mb(tenant.id, max_disk_mb)
            return tenant_view(tenant)
        finally:
            store.dispose()

    body = run_guarded(_update)
    render.emit(body, output, lambda wide: render.columns_table([body], TENANT_COLUMNS, wide))


@tenants_app.command("grant")
def tenants_grant(
    name: str,
    grant: Grant = None,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    replace: Annotated[bool, typer.Option(help="the grants become exactly these")] = False,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Let a tenant's sandboxes read host folders (its code and data), read-only; they must
    be readable by its sandbox user (``tenants list`` shows the uid)."""

    def _grant() -> dict[str, Any]:
        grants = checked_grants(grant or [], data_dir)
        store = _store(data_dir, db)
        try:
            tenant = store.tenancy.named(name)
            kept = [] if replace else [g for g in tenant.grants if g not in grants]
            return tenant_view(store.tenancy.set_grants(tenant.id, [*kept, *grants]))
        finally:
            store.dispose()

    body = run_guarded(_grant)
    render.emit(body, output, lambda wide: render.columns_table([body], TENANT_COLUMNS, wide))


@tenants_app.command("tokens")
def tenants_tokens(
    name: str,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """A tenant's tokens: ids, roles, labels, revocations (never the secrets)."""

    def _tokens() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            return {
                "tokens": [
                    token_view(t) for t in store.tenancy.tokens(store.tenancy.named(name).id)
                ]
            }
        finally:
            store.dispose()

    body = run_guarded(_tokens)
    render.emit_list(body, body["tokens"], TOKEN_COLUMNS, output, "no tokens")


@tenants_app.command("revoke-token")
def tenants_revoke_token(
    token_id: str,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Revoke any token by its id or a unique prefix of it (a tenant's, a job's, an
    operator's): the running service refuses it from its next request on."""

    def _revoke() -> dict[str, Any]:
        reference(token_id, "token")  # before the store is opened
        store = _store(data_dir, db)
        try:
            owners = [None, *(t.id for t in store.tenancy.all())]
            ids = [t.id for owner in owners for t in store.tenancy.tokens(owner)]
            return token_view(store.tenancy.revoke(unique_token_id(token_id, ids), None))
        finally:
            store.dispose()

    body = run_guarded(_revoke)
    render.emit(body, output, lambda wide: f"token {body['id']} revoked")


@tenants_app.command("operator-token")
def tenants_operator_token(
    label: str = "operator",
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Mint an operator token: it reads /metrics (every tenant's counts) and nothing else."""
    from deepedge.service.tenants import TokenRole

    def _mint() -> dict[str, Any]:
        store = _store(data_dir, db)
        try:
            record, secret = store.tenancy.create_token(
                TokenRole.OPERATOR, tenant_id=None, label=label
            )
        finally:
            store.dispose()
        return {**token_view(record), "token": secret}

    body = run_guarded(_mint)
    render.emit(body, output, lambda wide: f"operator token {body['id']}, shown once:\n"
                f"{body['token']}")  # fmt: skip


@tokens_app.command("list")
def tokens_list(url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE) -> None:
    """Your tenant's tokens, revoked ones included (never the secrets)."""
    body = run_guarded(lambda: connect(url, token).get("/v1/tokens"))
    render.emit_list(body, body["tokens"], TOKEN_COLUMNS, output, "no tokens")


@tokens_app.command("create")
def tokens_create(
    label: str = "api", url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Mint another token of your tenant (shown once)."""
    body = run_guarded(
        lambda: connect(url, token).call("POST", "/v1/tokens", json={"label": label})
    )
    render.emit(body, output, lambda wide: f"token {body['id']} ({body['label']}), shown once:\n"
                f"{body['token']}")  # fmt: skip


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: str, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Revoke one of your tenant's tokens (its id or a unique prefix): refused from the next
    request on."""

    def _revoke() -> Any:
        reference(token_id, "token")
        service = connect(url, token)
        ids = [t["id"] for t in service.get("/v1/tokens")["tokens"]]
        return service.call("DELETE", "/v1/tokens/" + segment(unique_token_id(token_id, ids)))

    body = run_guarded(_revoke)
    render.emit(body, output, lambda wide: f"token {body['id']} revoked")
