"""``deepedge jobs ...``: submit, watch and control jobs on a running service.

Every command finds the service through :mod:`deepedge.cli.client` (options, environment,
context), takes a job as any unique prefix of its id, and prints through
:mod:`deepedge.cli.render` (``-o table|wide|json|yaml``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import check_number, group, read_structured, run_guarded
from deepedge.cli.client import Token, Url, connect, reference, segment, write_bytes
from deepedge.cli.completion import complete_job_ids
from deepedge.cli.render import Column, Output, OutputFormat
from deepedge.core import errors

jobs_app = group("jobs")

JobRef = Annotated[
    str,
    typer.Argument(help="job id, or any unique prefix of it", autocompletion=complete_job_ids),
]


def job_path(job_id: str, *rest: str) -> str:
    """The API path of a job given on the command line (checked: hex digits)."""
    return "/".join(["/v1/jobs", segment(reference(job_id, "job")), *rest])


JOB_COLUMNS = [
    Column("id", lambda j: render.short_id(j["id"])),
    Column("name", lambda j: j["name"]),
    Column("kind", lambda j: j["kind"]),
    Column("status", lambda j: j["status"]),
    Column("restarts", lambda j: j["restarts"], right=True),
    Column("age", lambda j: render.ago(j["created_at"])),
    Column("updated", lambda j: render.ago(j["updated_at"]) + " ago"),
    Column("full id", lambda j: j["id"], wide=True),
    Column("created", lambda j: render.clock(j["created_at"]), wide=True),
    Column("error", lambda j: _error(j), wide=True),
]


def _error(job: dict[str, Any]) -> str | None:
    error = job.get("error")
    return f"{error['code']}: {error['message']}" if error else None


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
    url: Url = None,
    token: Token = None,
    idempotency_key: Annotated[str | None, typer.Option(help="retry-safe submit key")] = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Submit a job manifest (YAML or JSON); answers once the job is durably stored."""

    def _submit() -> Any:
        document = read_structured(manifest)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return connect(url, token).call("POST", "/v1/jobs", json=document, headers=headers)

    job = run_guarded(_submit)
    short = render.short_id(job["id"])
    render.emit(
        job,
        output,
        lambda wide: (
            f"job {job['name']} ({job['id'] if wide else short}) {job['status']}\n"
            f"follow it: deepedge jobs logs {short} --follow"
        ),
    )


@jobs_app.command("list")
def list_jobs(
    url: Url = None,
    token: Token = None,
    status: Annotated[str | None, typer.Option(help="only jobs in this status")] = None,
    limit: int = 50,
    before: Annotated[
        float | None, typer.Option(help="next page: the previous page's next_before")
    ] = None,
    before_id: Annotated[
        str | None, typer.Option(help="next page: the previous page's next_before_id")
    ] = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Your jobs, newest first (one page; the next one is named below the table)."""

    def _list() -> Any:
        check_number(limit, "--limit", ge=1, le=500)
        return connect(url, token).get(
            "/v1/jobs",
            limit=limit,
            status=status.upper() if status else None,
            before=before,
            before_id=before_id or None,
        )

    page = run_guarded(_list)
    footer = None
    if page.get("next_before") is not None:
        footer = (
            f"(more: deepedge jobs list --before {page['next_before']!r} "
            f"--before-id {page['next_before_id']})"
        )
    empty = "No jobs. Submit one with: deepedge jobs submit examples/jobs/placement.yaml"
    render.emit_list(page, page["jobs"], JOB_COLUMNS, output, empty, footer)


def render_job(job: dict[str, Any], wide: bool) -> str:
    """``jobs status``: the job's fields, its timestamped history and its checkpoints."""
    manifest = job.get("manifest") or {}
    resources = manifest.get("resources") or {}
    head = render.fields(
        [
            ("job", f"{job['name']} ({job['id'] if wide else render.short_id(job['id'])})"),
            ("kind", job["kind"]),
            ("status", job["status"]),
            ("error", _error(job)),
            ("created", render.when(job["created_at"])),
            ("updated", render.when(job["updated_at"])),
            ("restarts", job["restarts"]),
            ("learners", manifest.get("learners", 1)),
            (
                "resources",
                ", ".join(f"{k} {v}" for k, v in resources.items() if v is not None) or None,
            ),
        ]
    )
    history = render.columns_table(
        job.get("history", []),
        [
            Column("at", lambda h: render.clock(h["at"])),
            Column("status", lambda h: h["status"]),
            Column("cause", lambda h: h.get("cause")),
        ],
    )
    checkpoints = job.get("checkpoints", [])
    saved = render.columns_table(
        checkpoints,
        [
            Column("name", lambda c: c["name"]),
            Column("size", lambda c: f"{c['size_bytes'] / 1024:.1f} KiB", right=True),
            Column("saved", lambda c: render.ago(c["created_at"]) + " ago"),
        ],
    )
    return "\n".join(
        [
            head,
            render.section("history", history),
            render.section("checkpoints", saved if checkpoints else ""),
        ]
    )


@jobs_app.command("status")
def status(
    job_id: JobRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Show a job with its timestamped history and checkpoints."""

    def _status() -> Any:
        path = job_path(job_id)  # checked before anything is asked
        return connect(url, token).get(path)

    job = run_guarded(_status)
    render.emit(job, output, lambda wide: render_job(job, wide))


def render_metrics(body: dict[str, Any], wide: bool) -> str:
    """``jobs metrics``: one row per sample, one column per metric the learners reported."""
    samples = body.get("samples", [])
    head = (
        f"job {body['job_id'] if wide else render.short_id(body['job_id'])}: {body['status']}, "
        f"{body['restarts']} restarts, {body['checkpoints']} checkpoints"
    )
    if not samples:
        return head + "\nno metric samples reported (yet)"
    keys: list[str] = []
    for sample in samples:
        keys += [k for k in sample if k != "at" and k not in keys]
    columns: list[Column] = []
    if any("at" in s for s in samples):
        columns.append(Column("at", lambda s: render.clock(s.get("at"))))
    columns += [Column(k, _sample_cell(k), right=True) for k in keys]
    return head + "\n" + render.columns_table(samples, columns)


def _sample_cell(key: str) -> Callable[[dict[str, Any]], object]:
    return lambda sample: sample.get(key)


@jobs_app.command("metrics")
def metrics(
    job_id: JobRef,
    url: Url = None,
    token: Token = None,
    limit: int = 20,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Show the newest metric samples the job's learners reported (epochs of an update)."""

    def _metrics() -> Any:
        check_number(limit, "--limit", ge=1, le=10_000)
        path = job_path(job_id, "metrics")
        return connect(url, token).get(path, limit=limit)

    body = run_guarded(_metrics)
    render.emit(body, output, lambda wide: render_metrics(body, wide))


def _act(job_id: str, url: str | None, token: str | None, verb: str, output: OutputFormat) -> None:
    """A control action; its answer as one line (or the document)."""

    def _call() -> Any:
        path = job_path(job_id, verb)
        return connect(url, token).call("POST", path)

    body = run_guarded(_call)
    render.emit(
        body,
        output,
        lambda wide: (
            f"job {body.get('job_id') or body.get('id')}: "
            f"{body.get('message') or body.get('status')}"
        ),
    )


@jobs_app.command("checkpoint")
def checkpoint(
    job_id: JobRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Ask a running job to checkpoint now."""
    _act(job_id, url, token, "checkpoint", output)


@jobs_app.command("halt")
def halt(
    job_id: JobRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Stop a job; it can be resumed from its newest checkpoint."""
    _act(job_id, url, token, "halt", output)


@jobs_app.command("resume")
def resume(
    job_id: JobRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Queue a halted job again; it continues from its newest checkpoint."""
    _act(job_id, url, token, "resume", output)


@jobs_app.command("delete")
def delete(
    job_id: JobRef, url: Url = None, token: Token = None, output: Output = OutputFormat.TABLE
) -> None:
    """Delete a finished or halted job and its working directory."""

    def _delete() -> dict[str, Any]:
        path = job_path(job_id)
        service = connect(url, token)
        job = service.get(path)  # the whole id, from any prefix
        service.call("DELETE", job_path(job["id"]))
        return {"deleted": job["id"], "name": job["name"]}

    body = run_guarded(_delete)
    render.emit(body, output, lambda wide: f"job {body['name']} ({body['deleted']}) deleted")


@jobs_app.command("logs")
def logs(
    job_id: JobRef,
    url: Url = None,
    token: Token = None,
    rank: int = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="stream until the job ends")
    ] = False,
) -> None:
    """Print a learner's log (all attempts); with --follow keep streaming."""

    def _stream() -> None:
        params = {"rank": rank, "follow": str(follow).lower()}
        check_number(rank, "--rank", ge=0, le=100_000)
        path = job_path(job_id, "logs")
        with connect(url, token).stream(path, **params) as chunks:
            write_bytes(chunks)

    run_guarded(_stream)
