"""``deepedge serve``, ``deepedge tenants create`` and ``deepedge context``.

``serve`` says where it listens as soon as the socket is bound (the API, the dashboard, the
data folder), writes the context so that the client commands find it, and prints the
``export`` lines for other shells; it puts the previous context back when it stops.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import app, check_number, group, run_guarded
from deepedge.cli.client import DEFAULT_URL, Token, Url, resolve, service_of
from deepedge.cli.context import (
    Context,
    context_path,
    export_lines,
    read_context,
    restore_context,
    write_context,
    write_token_file,
)
from deepedge.cli.render import Output, OutputFormat
from deepedge.core import errors
from deepedge.service.disk_quota import DEFAULT_MAX_DISK_MB

tenants_app = group("tenants")
context_app = group("context")

DataDir = Annotated[Path, typer.Option("--data-dir", help="service data folder")]
DbUrl = Annotated[
    str | None, typer.Option("--db", help="database URL (default: SQLite in --data-dir)")
]
DASHBOARD = "/dashboard"


def checked_grants(paths: list[Path], data_dir: Path) -> list[str]:
    """Absolute paths, each one grantable (InvalidInputError naming the first that is not)."""
    from deepedge.service.sandbox import grant_problem

    grants = [str(p.absolute()) for p in paths]
    for grant in grants:
        problem = grant_problem(grant, data_dir.absolute())
        if problem is not None:
            raise errors.InvalidInputError(f"--grant {problem}", field="grant")
    return grants


def _reachable_host(host: str) -> str:
    """The address a client on this machine uses for a server bound to ``host``."""
    return "127.0.0.1" if host in {"0.0.0.0", "", "::"} else host


def _announce(url: str, data_dir: Path, written: bool, serving: str | None) -> list[str]:
    lines = [
        f"deepedge service listening at {url} (data {data_dir}; Ctrl-C stops it)",
        f"dashboard: {url}{DASHBOARD}",
    ]
    if serving is not None:
        lines.append(f"data plane (Open Inference Protocol): {serving}/v2 once its Ray is up; "
                     "a camera's key: deepedge deployments keys create NAME")  # fmt: skip
    if written:
        lines.append(f"context: {context_path()} (the client commands use it); other shells:")
    else:
        lines.append("other shells:")
    lines += ["  " + line for line in export_lines(url)]
    lines.append(
        f"a tenant and its token: deepedge tenants create NAME --data-dir {data_dir} --save-token"
    )
    return lines


@app.command()
def serve(
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    host: Annotated[str, typer.Option(help="bind address (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one)")] = 8750,
    supervise: Annotated[
        bool, typer.Option(help="restart the serving process at once if it dies")
    ] = True,
    max_request_mb: Annotated[
        float, typer.Option(help="request bodies over this are refused with 413")
    ] = 16.0,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            envvar="RAY_ADDRESS",
            help="Ray cluster the learners connect to (default: each starts an embedded Ray)",
        ),
    ] = None,
    learners_on_ray: Annotated[
        bool,
        typer.Option(help="run each learner as a Ray task on --ray-address, placed by resources"),
    ] = False,
    write_context_file: Annotated[
        bool,
        typer.Option(
            "--context/--no-context", help="point the client commands' context at this service"
        ),
    ] = True,
    trusted_tenants: Annotated[
        bool,
        typer.Option(
            "--trusted-tenants",
            help="run tenants' code as the service itself, without a sandbox (only for "
            "tenants who may see each other's data and the service's)",
        ),
    ] = False,
    public_metrics: Annotated[
        bool, typer.Option("--public-metrics", help="/metrics without the operator's token")
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="a Host name the API answers besides the loopback ones (repeatable)",
        ),
    ] = None,
    data_plane: Annotated[
        bool,
        typer.Option(
            help="serve deployments through Ray Serve (Open Inference Protocol), on the Ray "
            "cluster of --ray-address or on an embedded Ray head"
        ),
    ] = True,
    data_plane_host: Annotated[str, typer.Option(help="the data plane's HTTP address")] = (
        "127.0.0.1"
    ),
    data_plane_port: Annotated[int, typer.Option(help="the data plane's HTTP port")] = 8000,
) -> None:
    """Run the job service (REST API, lifecycle manager, dashboard, data plane) until
    interrupted. Tenants' code runs in sandboxes of its own (bubblewrap); without
    bubblewrap the service refuses to start unless told --trusted-tenants."""
    from deepedge.api.server import serve as run_server
    from deepedge.service.config import ServiceSettings
    from deepedge.service.sandbox import Isolation

    written: list[tuple[Context, str | None]] = []

    def listening(bound_port: int) -> None:
        url = f"http://{_reachable_host(host)}:{bound_port}"
        if write_context_file:
            previous = read_context_quietly_for(data_dir)
            context = Context(
                url=url,
                token_file=previous.token_file if previous is not None else None,
                tenant=previous.tenant if previous is not None else None,
                data_dir=str(data_dir.resolve()),
                written_by="deepedge serve",
            )
            written.append(write_context(context))
        serving = (f"http://{_reachable_host(data_plane_host)}:{data_plane_port}"
                   if data_plane else None)  # fmt: skip
        for line in _announce(url, data_dir, bool(written), serving):
            typer.echo(line)

    def _serve() -> None:
        check_number(max_request_mb, "--max-request-mb", gt=0.0, le=4096.0)
        max_bytes = max(1, int(max_request_mb * (1 << 20)))
        if learners_on_ray and not ray_address:
            raise errors.InvalidInputError("--learners-on-ray needs --ray-address", "ray_address")
        settings = ServiceSettings(
            data_dir=data_dir,
            database_url=db,
            max_request_bytes=max_bytes,
            ray_address=ray_address or None,
            learners_on_ray=learners_on_ray,
            isolation=Isolation.TRUSTED if trusted_tenants else Isolation.SANDBOX,
            public_metrics=public_metrics,
            allowed_hosts=(host, *(allowed_host or [])),
            serving=data_plane,
            serving_host=data_plane_host,
            serving_port=data_plane_port,
        )
        try:
            run_server(settings, host, port, supervise=supervise, on_listening=listening)
        except OSError as exc:
            if written:
                raise
            raise errors.DependencyUnavailableError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        finally:
            for context, previous in written:
                restore_context(context, previous)

    run_guarded(_serve)


def read_context_quietly_for(data_dir: Path) -> Context | None:
    """The current context when it belongs to the same data folder (its token still fits)."""
    try:
        current = read_context()
    except errors.InvalidInputError:
        return None
    if current is None or current.data_dir != str(data_dir.resolve()):
        return None
    return current


@tenants_app.command("create")
def tenants_create(
    name: str,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    max_active_jobs: int = 4,
    max_queued_jobs: int = 1000,
    max_cores: float = 8.0,
    max_gpus: int = 0,
    max_disk_mb: Annotated[
        int,
        typer.Option(
            min=1, help="disk quota of the tenant's folders (jobs, runs, deployments) together"
        ),
    ] = DEFAULT_MAX_DISK_MB,
    grant: Annotated[
        list[Path] | None,
        typer.Option(
            "--grant",
            help="a host folder the tenant's sandboxes may read (its workloads' code and "
            "data), repeatable; more later with `deepedge tenants grant`",
        ),
    ] = None,
    save_token: Annotated[
        bool,
        typer.Option(
            "--save-token",
            help="also keep the token in DATA_DIR/tokens/NAME.token (mode 0600) and point the "
            "context at it",
        ),
    ] = False,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Create a tenant and print its token (shown once; only its hash is stored)."""
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore
    from deepedge.service.tenants import new_token

    def _create() -> dict[str, Any]:

        grants = checked_grants(grant or [], data_dir)
        settings = ServiceSettings(data_dir=data_dir, database_url=db)
        data_dir.mkdir(parents=True, exist_ok=True)
        store = JobStore(settings.url)
        store.migrate()
        token = new_token()
        try:
            settings.claim_uids(store)
            tenant = store.create_tenant(
                name,
                token,
                max_active_jobs=max_active_jobs,
                max_queued_jobs=max_queued_jobs,
                max_cores=max_cores,
                max_gpus=max_gpus,
                grants=grants,
                max_disk_mb=max_disk_mb,
            )
        finally:
            store.dispose()
        body: dict[str, Any] = {
            "tenant": tenant.name, "id": tenant.id, "token": token,
            "sandbox_uid": tenant.uid, "grants": list(tenant.grants),
            "max_disk_mb": tenant.max_disk_mb,
        }  # fmt: skip
        if save_token:
            path = write_token_file(data_dir / "tokens" / f"{tenant.name}.token", token)
            body["token_file"] = str(path)
            current = read_context_quietly_for(data_dir)
            context = Context(
                url=current.url if current is not None else DEFAULT_URL,
                token_file=str(path),
                tenant=tenant.name,
                data_dir=str(data_dir.resolve()),
                written_by="deepedge tenants create --save-token",
            )
            write_context(context)
        return body

    body = run_guarded(_create)

    def human(wide: bool) -> str:
        lines = [
            f"tenant {body['tenant']} created (id {body['id']}); its token, shown once "
            "(only its hash is stored):",
            body["token"],
        ]
        if "token_file" in body:
            lines += [f"kept in {body['token_file']} (the context names it); other shells:"]
            lines += ["  " + line for line in export_lines(DEFAULT_URL, body["token_file"])[1:]]
        else:
            lines += [f"export DEEPEDGE_TOKEN={body['token']}"]
        return "\n".join(lines)

    render.emit(body, output, human)


@context_app.command("show")
def context_show(url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE) -> None:
    """Where the client commands go and as whom: the service's URL, where it came from, the
    tenant the token speaks for (asked of the service; offline, the context's)."""

    def _show() -> dict[str, Any]:
        target = resolve(url, token)
        saved = read_context()
        body: dict[str, Any] = {
            "url": target.url,
            "url_source": target.url_source,
            "online": False,
            "problem": None,
            "tenant": saved.tenant if saved is not None else None,
            "tenant_id": None,
            "context_file": str(context_path()),
            "context": None if saved is None else asdict(saved),
        }
        try:
            tenant = service_of(target).get("/v1/tenant")
        except (errors.DependencyUnavailableError, errors.UnauthorizedError) as exc:
            body["problem"] = exc.message
            return body
        body.update(online=True, tenant=tenant["name"], tenant_id=tenant["id"])
        return body

    body = run_guarded(_show)

    def human(wide: bool) -> str:
        saved = body["context"] or {}
        status = "online" if body["online"] else "offline"
        tenant = body["tenant"]
        if tenant is not None and body["tenant_id"] is not None:
            tenant = (
                f"{tenant} ({body['tenant_id'] if wide else render.short_id(body['tenant_id'])})"
            )
        rows: list[tuple[str, object]] = [
            ("service", body["url"]),
            ("status", status),
            ("problem", body["problem"]),
            ("from", body["url_source"]),
            ("tenant", tenant),
            ("dashboard", body["url"] + DASHBOARD),
            ("context file", body["context_file"]),
        ]
        if wide:
            rows += [
                ("token file", saved.get("token_file")),
                ("data folder", saved.get("data_dir")),
                ("written by", saved.get("written_by")),
                ("written", render.when(saved.get("written_at")) if saved else None),
            ]
        return render.fields(rows)

    render.emit(body, output, human)


@context_app.command("set")
def context_set(
    url: Annotated[str, typer.Option("--url", help="the service's address")],
    token_file: Annotated[
        Path | None, typer.Option(help="a file that holds the tenant token (kept by reference)")
    ] = None,
) -> None:
    """Point the client commands at a service (and a token file) by hand."""

    def _set() -> None:
        if token_file is not None and not token_file.is_file():
            raise errors.InvalidInputError(f"no token file at {token_file}", field="token_file")
        current = read_context()
        context = Context(
            url=url.rstrip("/"),
            token_file=str(token_file.resolve()) if token_file is not None else None,
            tenant=None,
            data_dir=current.data_dir if current is not None else None,
            written_by="deepedge context set",
        )
        write_context(context)
        typer.echo(f"context {context_path()}: {context.url}")

    run_guarded(_set)


@context_app.command("clear")
def context_clear() -> None:
    """Forget the context (the client commands then need --url/--token or the environment)."""
    context_path().unlink(missing_ok=True)
    typer.echo(f"removed {context_path()}")
