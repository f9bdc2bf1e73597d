"""``deepedge deploy FILE.yaml``, ``deepedge deployments
list|show|rollback|update|stop|delete|download`` and ``deepedge models versions``: clients of
the control plane's REST API.

A deployment is named by its name or any unique prefix of its id; output goes through
:mod:`deepedge.cli.render` (``-o table|wide|json|yaml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import app, check_number, group, read_structured, run_guarded
from deepedge.cli.client import Service, Token, Url, connect, reference, segment
from deepedge.cli.completion import complete_deployments
from deepedge.cli.render import Column, Output, OutputFormat
from deepedge.core import errors

deployments_app = group("deployments")
models_app = group("models")
DeploymentRef = Annotated[
    str,
    typer.Argument(
        help="deployment name, or a unique prefix of its id", autocompletion=complete_deployments
    ),
]

DEPLOYMENT_COLUMNS = [
    Column("name", lambda d: d["name"]),
    Column("status", lambda d: d["status"]),
    Column("serving", lambda d: render.version(d["serving_version"])),
    Column("canary", lambda d: render.version(d["canary_version"])),
    Column("window", lambda d: _window(d["window"]), right=True),
    Column("accuracy", lambda d: render.percent(d["last_accuracy"]), right=True),
    Column("threshold", lambda d: render.percent(d.get("accuracy_threshold")), right=True),
    Column("update job", lambda d: render.short_id(d["current_job_id"])),
    Column("age", lambda d: render.ago(d["created_at"])),
    Column("id", lambda d: d["id"], wide=True),
    Column("policy", lambda d: d["update_policy"], wide=True),
    Column("workload", lambda d: d["workload"], wide=True),
    Column("nodes", lambda d: d["nodes"], wide=True),
]
VERSION_COLUMNS = [
    Column("deployment", lambda v: v["deployment"]),
    Column("version", lambda v: render.version(v["version"])),
    Column("status", lambda v: v["status"]),
    Column("parent", lambda v: render.version(v["parent_version"])),
    Column("gate", lambda v: render.percent(v["metrics"].get("gate_accuracy")), right=True),
    Column("windows", lambda v: v["data_windows"]),
    Column("job", lambda v: render.short_id(v["job_id"])),
    Column("age", lambda v: render.ago(v["created_at"])),
    Column("served", lambda v: v["windows_served"], wide=True, right=True),
    Column("replaced", lambda v: render.version(v["replaced_version"]), wide=True),
    Column("note", lambda v: v["note"], wide=True),
]


def _window(number: int) -> int | None:
    """A deployment's window number; none before its first scored window (-1)."""
    return number if number >= 0 else None


def resolve_deployment(service: Service, given: str) -> str:
    """The name of the caller's deployment that ``given`` names: its name, or a prefix of its
    id that no other of the caller's deployments shares."""
    given = reference(given, "deployment")
    listed = service.get("/v1/deployments")["deployments"]
    if any(d["name"] == given for d in listed):
        return given
    matches = [d["name"] for d in listed if d["id"].startswith(given.lower())]
    if len(matches) == 1:
        return str(matches[0])
    if len(matches) > 1:
        raise errors.InvalidInputError(
            f"deployment id prefix {given!r} is ambiguous ({', '.join(matches[:3])}): "
            "give more characters or the name",
            field="deployment",
        )
    raise errors.NotFoundError(f"deployment {given} not found")


def _named(url: str | None, token: str | None, given: str) -> tuple[Service, str]:
    """The service and the deployment's path there (``/v1/deployments/NAME``)."""
    service = connect(url, token)
    return service, deployment_path(resolve_deployment(service, given))


def deployment_path(name: str, *rest: str) -> str:
    return "/".join(["/v1/deployments", segment(name), *rest])


@app.command()
def deploy(
    spec: Path, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Create a deployment from FILE.yaml (or JSON); the same file again is a no-op. A
    relative workload file is read from FILE's folder (sent as an absolute path)."""

    def _deploy() -> tuple[str, Any]:
        from deepedge.controlplane.deployment_spec import WORKLOAD_FILE_SUFFIXES

        document = read_structured(spec)
        workload = document.get("workload") if isinstance(document, dict) else None
        relative = isinstance(workload, str) and not Path(workload).is_absolute()
        if relative and str(workload).endswith(WORKLOAD_FILE_SUFFIXES):
            document["workload"] = str((spec.parent / str(workload)).resolve())
        service = connect(url, token)
        return service.url, service.call("POST", "/v1/deployments", json=document)

    base, body = run_guarded(_deploy)
    render.emit(
        body,
        output,
        lambda wide: (
            f"deployment {body['name']} ({body['id']}): {body['status']}\n"
            f"watch it: deepedge deployments show {body['name']}   or   "
            f"{base}/dashboard#/deployments/{body['name']}"
        ),
    )


@deployments_app.command("list")
def list_deployments(
    url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """One line per deployment: status, serving and canary versions, last accuracy."""
    body = run_guarded(lambda: connect(url, token).get("/v1/deployments"))
    empty = "No deployments. Create one with: deepedge deploy examples/deployments/digits-line.yaml"
    render.emit_list(body, body["deployments"], DEPLOYMENT_COLUMNS, output, empty)


def render_deployment(body: dict[str, Any], wide: bool, windows: int) -> str:
    """``deployments show``: the deployment, its versions, latest windows and decisions."""
    spec = body.get("spec") or {}
    threshold = render.get(spec, "trigger", "accuracy_threshold")
    head = render.fields(
        [
            ("deployment", f"{body['name']} ({body['id']})"),
            ("status", body["status"]),
            ("workload", body["workload"]),
            ("update policy", body["update_policy"]),
            ("nodes", body["nodes"]),
            ("serving", render.version(body["serving_version"])),
            (
                "canary",
                "none"
                if body["canary_version"] is None
                else render.version(body["canary_version"]),
            ),
            ("window", _window(body["window"])),
            ("last accuracy", render.percent(body["last_accuracy"])),
            ("trigger below", render.percent(threshold) if threshold is not None else None),
            (
                "update job",
                body["current_job_id"] if wide else render.short_id(body["current_job_id"]),
            ),
            ("created", render.when(body["created_at"])),
        ]
    )
    versions = render.columns_table(body["versions"], VERSION_COLUMNS[1:], wide)
    points = render.columns_table(
        body["windows"][-windows:],
        [
            Column("window", lambda w: w["window"], right=True),
            Column("at", lambda w: render.clock(w["at"])),
            Column("served", lambda w: render.version(w["served_version"])),
            Column("accuracy", lambda w: render.percent(w["accuracy"]), right=True),
            Column("canary", lambda w: render.version(w["canary_version"])),
            Column("canary acc.", lambda w: render.percent(w["canary_accuracy"]), right=True),
            Column("trigger", lambda w: None if w["trigger"] == "none" else w["trigger"]),
            Column("severity", lambda w: w["severity"], wide=True, right=True),
            Column("samples", lambda w: w["samples"], wide=True, right=True),
        ],
        wide,
    )
    decisions = render.columns_table(
        body["events"][-windows:],
        [
            Column("#", lambda e: e["seq"], right=True),
            Column("at", lambda e: render.clock(e["at"])),
            Column("window", lambda e: e["window"], right=True),
            Column("decision", lambda e: e["kind"]),
            Column("version", lambda e: render.version(e["version"])),
            Column("message", lambda e: e["message"]),
        ],
        wide,
    )
    return "\n".join(
        [
            head,
            render.section("versions", versions if body["versions"] else ""),
            render.section("windows (newest last)", points if body["windows"] else ""),
            render.section("decisions (newest last)", decisions if body["events"] else ""),
        ]
    )


@deployments_app.command("show")
def show(
    name: DeploymentRef,
    url: Url = None,
    token: Token = None,
    output: Output = OutputFormat.TABLE,
    windows: Annotated[int, typer.Option(help="windows and decisions to print")] = 10,
) -> None:
    """A deployment: its versions, its latest windows and decisions."""

    def _show() -> Any:
        check_number(windows, "--windows", ge=1, le=1_000_000)
        service, path = _named(url, token, name)
        return service.get(path)

    body = run_guarded(_show)
    render.emit(body, output, lambda wide: render_deployment(body, wide, windows))


def _summary_line(body: dict[str, Any], what: str) -> str:
    return (
        f"{body['name']}: {what} (status {body['status']}, serving "
        + render.version(body["serving_version"])
        + ")"
    )


@deployments_app.command("rollback")
def rollback(
    name: DeploymentRef,
    url: Url = None,
    token: Token = None,
    to: Annotated[int | None, typer.Option("--to", help="version to serve again")] = None,
    reason: Annotated[str | None, typer.Option(help="recorded with the decision")] = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Cancel a canary, or serve again the version the serving one replaced (or --to)."""

    def _rollback() -> Any:
        service, path = _named(url, token, name)
        payload = {"to_version": to, "reason": reason}
        return service.call("POST", f"{path}/rollback", json=payload)

    body = run_guarded(_rollback)
    render.emit(body, output, lambda wide: _summary_line(body, "rolled back"))


@deployments_app.command("update")
def update(
    name: DeploymentRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Ask for an update at the next window (the on-request trigger)."""

    def _update() -> Any:
        service, path = _named(url, token, name)
        return service.call("POST", f"{path}/update")

    body = run_guarded(_update)
    render.emit(body, output, lambda wide: _summary_line(body, "update requested"))


@deployments_app.command("stop")
def stop(
    name: DeploymentRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Stop the loop of a deployment; its versions and history are kept."""

    def _stop() -> Any:
        service, path = _named(url, token, name)
        return service.call("POST", f"{path}/stop")

    body = run_guarded(_stop)
    render.emit(body, output, lambda wide: _summary_line(body, "stopped"))


@deployments_app.command("delete")
def delete(
    name: DeploymentRef,
    url: Url = None,
    token: Token = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="do not ask: the deletion is confirmed")
    ] = False,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Delete a deployment for good (stopped first if it runs): its versions, windows,
    events, samples, inference keys and model files. Asks to type its name unless --yes;
    the name can then be deployed again with another spec."""

    def _delete() -> Any:
        service = connect(url, token)
        named = resolve_deployment(service, name)
        if not yes:
            typed = typer.prompt(
                f"Deleting {named} removes its versions, windows, events, samples, inference "
                "keys and model files for good. Type its name to confirm",
                default="",
                show_default=False,
            )
            if typed != named:
                raise errors.ConflictError(f"not deleted: {typed!r} is not {named!r}")
        return service.call("DELETE", deployment_path(named), params={"confirm": named})

    body = run_guarded(_delete)
    render.emit(body, output, lambda wide: f"{body['name']}: deleted with "
                f"{body.get('deleted_samples', 0)} samples and "
                f"{body.get('deleted_keys', 0)} inference keys")  # fmt: skip


@deployments_app.command("download")
def download(
    name: DeploymentRef,
    version: Annotated[int, typer.Argument(help="the version to download")],
    out: Annotated[Path, typer.Option("--out", help="the file to write")] = Path("model.pt"),
    url: Url = None,
    token: Token = None,
) -> None:
    """Write a version's whole model to --out: a torch.save state_dict (load it with
    torch.load(path, weights_only=True) into the workload's model) or, for a TorchScript
    workload, a TorchScript archive (torch.jit.load)."""

    def _download() -> str:
        if version < 1:
            raise errors.InvalidInputError(f"a version is 1 or more, got {version}", "version")
        service = connect(url, token)
        named = resolve_deployment(service, name)
        path = deployment_path(named, "versions", str(version), "model")
        with service.stream(path) as chunks:
            try:
                with out.open("wb") as handle:
                    for chunk in chunks:
                        handle.write(chunk)
            except OSError as exc:
                raise errors.InvalidInputError(
                    f"cannot write {out}: {exc.strerror}", "out"
                ) from exc
        return named

    named = run_guarded(_download)
    typer.echo(f"{named} v{version}: wrote {out}")


@models_app.command("versions")
def versions(
    url: Url = None,
    token: Token = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            help="only this deployment's (name or id prefix)",
            autocompletion=complete_deployments,
        ),
    ] = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Every model version with its lineage (parent, data windows, job) and status."""

    def _versions() -> Any:
        service = connect(url, token)
        named = None if deployment is None else resolve_deployment(service, deployment)
        return service.get("/v1/models/versions", deployment=named)

    body = run_guarded(_versions)
    empty = "No model versions yet: a deployment's first version appears once it is trained."
    render.emit_list(body, body["versions"], VERSION_COLUMNS, output, empty)
