"""``deepedge deploy FILE.yaml``, ``deepedge deployments
list|show|rollback|update|stop|delete|download`` and ``deepedge models versions``: clients of
the control plane's REST API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli.app import app, echo_json, read_structured, run_guarded
from deepedge.cli.jobs import DEFAULT_URL, Token, Url, _call, _client, _raise_for
from deepedge.cli.profile import models_app
from deepedge.controlplane.deployment_spec import WORKLOAD_FILE_SUFFIXES

deployments_app = typer.Typer(
    help="Watch and control deployments on a running service.", no_args_is_help=True
)
app.add_typer(deployments_app, name="deployments")
JsonFlag = Annotated[bool, typer.Option("--json", help="print the JSON document")]


@app.command()
def deploy(spec: Path, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Create a deployment from FILE.yaml (or JSON); the same file again is a no-op. A
    relative workload file is read from FILE's folder (sent as an absolute path)."""

    def _deploy() -> Any:
        document = read_structured(spec)
        workload = document.get("workload") if isinstance(document, dict) else None
        relative = isinstance(workload, str) and not Path(workload).is_absolute()
        if relative and str(workload).endswith(WORKLOAD_FILE_SUFFIXES):
            document["workload"] = str((spec.parent / str(workload)).resolve())
        return _call(url, token, "POST", "/v1/deployments", json=document)

    body = run_guarded(_deploy)
    typer.echo(f"deployment {body['name']} ({body['id']}): {body['status']}")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


@deployments_app.command("list")
def list_deployments(url: Url = DEFAULT_URL, token: Token = "", as_json: JsonFlag = False) -> None:
    """One line per deployment: status, serving and canary versions, last accuracy."""
    body = run_guarded(lambda: _call(url, token, "GET", "/v1/deployments"))
    if as_json:
        echo_json(body)
        return
    typer.echo(f"{'NAME':<20} {'STATUS':<9} {'SERVING':>7} {'CANARY':>6} {'WINDOW':>6} "
               f"{'ACCURACY':>8}  JOB")  # fmt: skip
    for d in body["deployments"]:
        typer.echo(
            f"{d['name']:<20} {d['status']:<9} {_fmt(d['serving_version']):>7} "
            f"{_fmt(d['canary_version']):>6} {d['window']:>6} {_fmt(d['last_accuracy']):>8}  "
            f"{d['current_job_id'] or '-'}"
        )


@deployments_app.command("show")
def show(
    name: str,
    url: Url = DEFAULT_URL,
    token: Token = "",
    as_json: JsonFlag = False,
    windows: Annotated[int, typer.Option(help="windows and decisions to print")] = 10,
) -> None:
    """A deployment: its versions, its latest windows and decisions."""
    body = run_guarded(lambda: _call(url, token, "GET", f"/v1/deployments/{name}"))
    if as_json:
        echo_json(body)
        return
    typer.echo(f"{body['name']} ({body['id']}): {body['status']}, serving "
               f"v{_fmt(body['serving_version'])}, canary v{_fmt(body['canary_version'])}, "
               f"nodes {', '.join(body['nodes'])}")  # fmt: skip
    typer.echo("versions:")
    for v in body["versions"]:
        typer.echo(f"  v{v['version']:<3} {v['status']:<11} parent v{_fmt(v['parent_version'])} "
                   f"windows {v['data_windows']} job {v['job_id'] or '-'} "
                   f"gate {_fmt(v['metrics'].get('gate_accuracy'))}")  # fmt: skip
    typer.echo("windows:")
    for w in body["windows"][-windows:]:
        canary = (f" canary v{w['canary_version']} {_fmt(w['canary_accuracy'])}"
                  if w["canary_version"] is not None else "")  # fmt: skip
        typer.echo(f"  {w['window']:>4} v{_fmt(w['served_version'])} accuracy "
                   f"{_fmt(w['accuracy'])}{canary} trigger {w['trigger']}")  # fmt: skip
    typer.echo("decisions:")
    for e in body["events"][-windows:]:
        typer.echo(f"  {e['seq']:>4} {e['kind']:<18} {e['message']}")


@deployments_app.command("rollback")
def rollback(
    name: str,
    url: Url = DEFAULT_URL,
    token: Token = "",
    to: Annotated[int | None, typer.Option("--to", help="version to serve again")] = None,
    reason: Annotated[str | None, typer.Option(help="recorded with the decision")] = None,
) -> None:
    """Cancel a canary, or serve again the version the serving one replaced (or --to)."""
    payload = {"to_version": to, "reason": reason}
    body = run_guarded(
        lambda: _call(url, token, "POST", f"/v1/deployments/{name}/rollback", json=payload)
    )
    typer.echo(f"{body['name']}: serving v{body['serving_version']} ({body['status']})")


@deployments_app.command("update")
def update(name: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Ask for an update at the next window (the on-request trigger)."""
    body = run_guarded(lambda: _call(url, token, "POST", f"/v1/deployments/{name}/update"))
    typer.echo(f"{body['name']}: update requested ({body['status']})")


@deployments_app.command("stop")
def stop(name: str, url: Url = DEFAULT_URL, token: Token = "") -> None:
    """Stop the loop of a deployment; its versions and history are kept."""
    body = run_guarded(lambda: _call(url, token, "POST", f"/v1/deployments/{name}/stop"))
    typer.echo(f"{body['name']}: {body['status']}")


@deployments_app.command("delete")
def delete(
    name: str,
    url: Url = DEFAULT_URL,
    token: Token = "",
    yes: Annotated[
        bool, typer.Option("--yes", help="do not ask: the deletion is confirmed")
    ] = False,
) -> None:
    """Delete a deployment for good (stopped first if it runs): its versions, windows,
    events and model files. Asks to type its name unless --yes; the name can then be
    deployed again with another spec."""
    if not yes:
        typed = typer.prompt(
            f"Deleting {name} removes its versions, windows, events and model files for "
            "good. Type its name to confirm",
            default="",
            show_default=False,
        )
        if typed != name:
            typer.echo(f"error: not deleted ({typed!r} is not {name!r})", err=True)
            raise typer.Exit(5)
    body = run_guarded(
        lambda: _call(url, token, "DELETE", f"/v1/deployments/{name}", params={"confirm": name})
    )
    typer.echo(f"{body['name']}: deleted")


@deployments_app.command("download")
def download(
    name: str,
    version: Annotated[int, typer.Argument(help="the version to download")],
    output: Annotated[Path, typer.Option("--output", "-o", help="file to write")] = Path(
        "model.pt"
    ),
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Write a version's whole model to --output: a torch.save state_dict (load it with
    torch.load(path, weights_only=True) into the workload's model) or, for a TorchScript
    workload, a TorchScript archive (torch.jit.load)."""

    def fetch() -> str:
        import httpx

        from deepedge.core import errors

        path = f"/v1/deployments/{name}/versions/{version}/model"
        try:
            with _client(url, token) as client:
                response = client.get(path)
        except httpx.HTTPError as exc:
            raise errors.DependencyUnavailableError(
                f"cannot reach the service at {url}: {exc}"
            ) from exc
        _raise_for(response)
        output.write_bytes(response.content)
        return response.headers.get("x-model-format", "state-dict")

    kind = run_guarded(fetch)
    typer.echo(f"{name} v{version}: wrote {output} ({kind})")


@models_app.command("versions")
def versions(
    url: Url = DEFAULT_URL,
    token: Token = "",
    deployment: Annotated[str | None, typer.Option(help="only this deployment's")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Every model version with its lineage (parent, data windows, job) and status."""
    query = f"?deployment={deployment}" if deployment else ""
    body = run_guarded(lambda: _call(url, token, "GET", f"/v1/models/versions{query}"))
    if as_json:
        echo_json(body)
        return
    typer.echo(f"{'DEPLOYMENT':<20} {'VER':>4} {'STATUS':<11} {'PARENT':>6} {'GATE':>6}  "
               "WINDOWS  JOB")  # fmt: skip
    for v in body["versions"]:
        typer.echo(f"{v['deployment']:<20} {v['version']:>4} {v['status']:<11} "
                   f"{_fmt(v['parent_version']):>6} {_fmt(v['metrics'].get('gate_accuracy')):>6}  "
                   f"{v['data_windows']}  {v['job_id'] or '-'}")  # fmt: skip
