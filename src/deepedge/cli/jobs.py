"""``deepedge serve``, ``deepedge tenants create`` and the ``deepedge jobs`` client.

The client talks to the REST API (``--url`` / ``DEEPEDGE_URL``, ``--token`` /
``DEEPEDGE_TOKEN``); an error answer becomes the matching typed error, hence the same
one-line message and exit code as any other deepedge command.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli.app import app, check_number, echo_json, read_structured, run_guarded
from deepedge.core import errors

jobs_app = typer.Typer(help="Submit and control jobs on a running service.", no_args_is_help=True)
tenants_app = typer.Typer(help="Manage tenants of a service's store.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")
app.add_typer(tenants_app, name="tenants")

DEFAULT_URL = "http://127.0.0.1:8750"
Url = Annotated[str, typer.Option("--url", envvar="DEEPEDGE_URL", help="service address")]
Token = Annotated[str, typer.Option("--token", envvar="DEEPEDGE_TOKEN", help="tenant token")]
DataDir = Annotated[Path, typer.Option("--data-dir", help="service data folder")]
DbUrl = Annotated[
    str | None, typer.Option("--db", help="database URL (default: SQLite in --data-dir)")
]

_BY_CODE: dict[str, type[errors.DeepEdgeError]] = {}
for _cls in (
    errors.InvalidInputError,
    errors.RequestTooLargeError,
    errors.InfeasibleError,
    errors.NotFoundError,
    errors.ConflictError,
    errors.IllegalTransitionError,
    errors.QuotaExceededError,
    errors.UnauthorizedError,
    errors.DependencyUnavailableError,
    errors.RunFailedError,
):
    _BY_CODE[_cls.code] = _cls


def _raise_for(response: Any) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {"message": response.text[:300]}
    cls = _BY_CODE.get(str(body.get("error")), errors.DeepEdgeError)
    raise cls(str(body.get("message", f"HTTP {response.status_code}")))


def _client(url: str, token: str) -> Any:
    import httpx

    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0, trust_env=False
    )


def _call(url: str, token: str, method: str, path: str, **kwargs: Any) -> Any:
    import httpx

    try:
        with _client(url, token) as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise errors.DependencyUnavailableError(
            f"cannot reach the service at {url}: {exc}"
        ) from exc
    _raise_for(response)
    return response.json() if response.content else {}


@app.command()
def serve(
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    host: Annotated[str, typer.Option(help="bind address (loopback by default)")] = "127.0.0.1",
    port: int = 8750,
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
    """Run the job service (REST API + lifecycle manager + data plane) until interrupted."""
    from deepedge.api.server import serve as run_server
    from deepedge.service.config import ServiceSettings

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
            serving=data_plane,
            serving_host=data_plane_host,
            serving_port=data_plane_port,
        )
        run_server(settings, host, port, supervise=supervise)

    run_guarded(_serve)


@tenants_app.command("create")
def tenants_create(
    name: str,
    data_dir: DataDir = Path("deepedge-data"),
    db: DbUrl = None,
    max_active_jobs: int = 4,
    max_queued_jobs: int = 1000,
    max_cores: float = 8.0,
    max_gpus: int = 0,
) -> None:
    """Create a tenant and print its token (shown once; only its hash is stored)."""
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore
    from deepedge.service.tenants import new_token

    def _create() -> dict[str, Any]:
        settings = ServiceSettings(data_dir=data_dir, database_url=db)
        data_dir.mkdir(parents=True, exist_ok=True)
        store = JobStore(settings.url)
        store.migrate()
        token = new_token()
        tenant = store.create_tenant(
            name,
            token,
            max_active_jobs=max_active_jobs,
            max_queued_jobs=max_queued_jobs,
            max_cores=max_cores,
            max_gpus=max_gpus,
        )
        store.dispose()
        return {"tenant": tenant.name, "id": tenant.id, "token": token}

    echo_json(run_guarded(_create))


@jobs_app.command("schema")
def schema(
    out: Annotated[Path, typer.Argument(help="file to write")] = Path(
        "docs/schemas/job-manifest.schema.json"
    ),
) -> None:
    """Write the JSON Schema of the job manifest."""
    from deepedge.service.manifest import manifest_schema

    def _write() -> None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(manifest_schema(), indent=2) + "\n")
        except OSError as exc:
            raise errors.InvalidInputError(f"cannot write {out}: {exc.strerror}") from exc

    run_guarded(_write)


@jobs_app.command("submit")
def submit(
    manifest: Path,
    url: Url = DEFAULT_URL,
    token: Token = "",
    idempotency_key: Annotated[str | None, typer.Option(help="retry-safe submit key")] = None,
) -> None:
    """Submit a job manifest (YAML or JSON); prints the job once it is durably stored."""

    def _submit() -> Any:
        document = read_structured(manifest)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return _call(url, token, "POST", "/v1/jobs", json=document, headers=headers)

    echo_json(run_guarded(_submit))


@jobs_app.command("list")
def list_jobs(
    url: Url = DEFAULT_URL,
    token: Token = "",
    status: Annotated[str | None, typer.Option(help="only jobs in this status")] = None,
    limit: int = 50,
    before: Annotated[
        float | None, typer.Option(help="next page: the previous page's next_before")
    ] = None,
    before_id: Annotated[
        str | None, typer.Option(help="next page: the previous page's next_before_id")
    ] = None,
) -> None:
    """List your jobs, newest first (one page; the answer names the next one)."""
    params: dict[str, Any] = {"limit": limit}
    if status:
        params["status"] = status.upper()
    if before is not None:
        params["before"] = before
    if before_id:
        params["before_id"] = before_id
    echo_json(run_guarded(lambda: _call(url, token, "GET", "/v1/jobs", params=params)))


@jobs_app.command("status")
def status(job_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Show a job with its timestamped history and checkpoints."""
    echo_json(run_guarded(lambda: _call(url, token, "GET", f"/v1/jobs/{job_id}")))


@jobs_app.command("metrics")
def metrics(job_id: str, url: Url = DEFAULT_URL, token: Token = "", limit: int = 20) -> None:
    """Show the newest metric samples the job's learners reported."""
    path = f"/v1/jobs/{job_id}/metrics"
    echo_json(run_guarded(lambda: _call(url, token, "GET", path, params={"limit": limit})))


@jobs_app.command("checkpoint")
def checkpoint(job_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Ask a running job to checkpoint now."""
    echo_json(run_guarded(lambda: _call(url, token, "POST", f"/v1/jobs/{job_id}/checkpoint")))


@jobs_app.command("halt")
def halt(job_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Stop a job; it can be resumed from its newest checkpoint."""
    echo_json(run_guarded(lambda: _call(url, token, "POST", f"/v1/jobs/{job_id}/halt")))


@jobs_app.command("resume")
def resume(job_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Queue a halted job again; it continues from its newest checkpoint."""
    echo_json(run_guarded(lambda: _call(url, token, "POST", f"/v1/jobs/{job_id}/resume")))


@jobs_app.command("delete")
def delete(job_id: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Delete a finished or halted job and its working directory."""
    run_guarded(lambda: _call(url, token, "DELETE", f"/v1/jobs/{job_id}"))
    echo_json({"deleted": job_id})


@jobs_app.command("logs")
def logs(
    job_id: str,
    url: Url = DEFAULT_URL,
    token: Token = "",
    rank: int = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the job ends")
    ] = False,
) -> None:
    """Print a learner's log (all attempts); with --follow keep streaming."""
    import httpx

    def _stream() -> None:
        params = {"rank": rank, "follow": str(follow).lower()}
        try:
            with (
                _client(url, token) as client,
                client.stream(
                    "GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=None
                ) as resp,
            ):
                if resp.status_code >= 400:
                    resp.read()
                    _raise_for(resp)
                for chunk in resp.iter_bytes():
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
        except httpx.HTTPError as exc:
            raise errors.DependencyUnavailableError(
                f"cannot reach the service at {url}: {exc}"
            ) from exc

    run_guarded(_stream)
