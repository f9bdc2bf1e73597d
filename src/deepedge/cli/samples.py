"""``deepedge deployments samples export|delete``: a deployment's sampled requests, taken
out or deleted for good.

``export`` writes the samples (inputs, answers, labels, their source and times, request
ids) to one NPZ archive, ``numpy.load`` reads it back (:mod:`deepedge.dataplane.sample_export`
lists its arrays); the file is created readable by its owner only, as the inputs are
people's camera images. ``delete`` removes them by request id, by time range, or all of
them, after asking unless ``--yes``, and says how many went. A time is seconds since the
epoch or an ISO 8601 date and time (without a zone: local time); a range is
``[since, until)``.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import CommandSet, run_guarded
from deepedge.cli.client import Token, Url, connect, write_bytes
from deepedge.cli.completion import complete_deployments
from deepedge.cli.deployments import deployment_path, deployments_app, resolve_deployment
from deepedge.cli.render import Output, OutputFormat
from deepedge.core import errors

samples_app = CommandSet(help="A deployment's sampled requests: export or delete them.",
                         no_args_is_help=True)  # fmt: skip
deployments_app.add_typer(samples_app, name="samples")
Deployment = Annotated[
    str,
    typer.Argument(
        help="deployment name, or a unique id prefix", autocompletion=complete_deployments
    ),
]
Since = Annotated[
    str | None,
    typer.Option(help="only samples served at or after this time (epoch seconds or ISO 8601)"),
]
Until = Annotated[
    str | None,
    typer.Option(help="only samples served before this time (epoch seconds or ISO 8601)"),
]
FILE_MODE = 0o600  # the inputs are people's camera images: the owner's only
STDOUT = "-"


def moment(given: str | None, flag: str) -> float | None:
    """``given`` as seconds since the epoch: a number, or an ISO 8601 date and time (local
    time when it names no zone)."""
    if given is None:
        return None
    text = given.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text).timestamp()
        except ValueError:
            value = math.nan
    if not math.isfinite(value):
        raise errors.InvalidInputError(
            f"{flag}: expected seconds since the epoch or an ISO 8601 time such as "
            f"2025-05-01T12:00:00Z, got {given!r}",
            field=flag.lstrip("-"),
        )
    return value


@samples_app.command("export")
def export(
    deployment: Deployment,
    out: Annotated[
        str | None,
        typer.Option("--out", help="the file to write, - for stdout [default: NAME-samples.npz]"),
    ] = None,
    since: Since = None,
    until: Until = None,
    url: Url = None,
    token: Token = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Write a deployment's samples to one NPZ archive (numpy.load reads it): inputs,
    request ids, times, versions, routes, predictions, labels and their source."""

    def _export() -> dict[str, Any]:
        params = {"since": moment(since, "--since"), "until": moment(until, "--until")}
        service = connect(url, token)
        named = resolve_deployment(service, deployment)
        target = out or f"{named}-samples.npz"
        with service.stream(deployment_path(named, "samples", "export"), **params) as chunks:
            count = int(chunks.headers.get("x-sample-count", "0"))
            size = write_bytes(chunks) if target == STDOUT else _write(Path(target), chunks)
        return {"deployment": named, "samples": count, "file": target, "bytes": size}

    body = run_guarded(_export)
    to_stdout = body["file"] == STDOUT
    if to_stdout:  # (the archive is stdout: the summary goes to stderr)
        typer.echo(f"{body['deployment']}: {body['samples']} samples", err=True)
        return
    render.emit(body, output, lambda wide: f"{body['deployment']}: wrote {body['samples']} "
                f"samples to {body['file']} ({body['bytes']} bytes)")  # fmt: skip


def _write(path: Path, chunks: Any) -> int:
    """Write the archive next to ``path`` and move it there once whole (a failed export
    leaves no partial file under the name), created owner-only."""
    part = path.with_name(path.name + ".part")
    size = 0
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
        os.replace(part, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            part.unlink()
        raise errors.InvalidInputError(f"cannot write {path}: {exc.strerror}", "out") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
    return size


@samples_app.command("delete")
def delete(
    deployment: Deployment,
    request_ids: Annotated[
        list[str] | None,
        typer.Option("--id", help="a sample's request id, the answer's (repeatable)"),
    ] = None,
    since: Since = None,
    until: Until = None,
    everything: Annotated[
        bool, typer.Option("--all", help="every sample of the deployment")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", help="do not ask: the deletion is confirmed")
    ] = False,
    url: Url = None,
    token: Token = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Delete a deployment's samples for good: those of the --id given, those served in a
    range (--since/--until), or --all of them; asks first unless --yes. The deployment
    keeps serving and sampling."""

    def _delete() -> Any:
        from deepedge.dataplane.sample_selection import deletion

        selection = deletion(request_ids or None, moment(since, "--since"),
                             moment(until, "--until"), everything)  # fmt: skip
        service = connect(url, token)
        named = resolve_deployment(service, deployment)
        if not yes:
            what = (
                "every sample" if everything
                else f"{len(selection.request_ids)} samples by id" if selection.request_ids
                else "the samples served " + _range_words(selection.since, selection.until)
            )  # fmt: skip
            if not typer.confirm(f"Delete {what} of {named} for good?", default=False):
                raise errors.ConflictError(f"not deleted: {named}'s samples are kept")
        ids = None if selection.request_ids is None else list(selection.request_ids)
        payload = {"request_ids": ids, "since": selection.since, "until": selection.until,
                   "all": everything}  # fmt: skip
        return service.call("DELETE", deployment_path(named, "samples"), json=payload)

    body = run_guarded(_delete)

    def human(wide: bool) -> str:
        line = f"{body['deployment']}: deleted {body['deleted']} samples"
        missing = body.get("not_found") or []
        if missing:
            shown = ", ".join(missing if wide else missing[:5])
            more = "" if wide or len(missing) <= 5 else f" and {len(missing) - 5} more"
            line += f"; {len(missing)} ids named no stored sample: {shown}{more}"
        return line

    render.emit(body, output, human)


def _range_words(since: float | None, until: float | None) -> str:
    def clock(at: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))

    parts = [] if since is None else [f"from {clock(since)}"]
    return " ".join(parts if until is None else [*parts, f"before {clock(until)}"])
