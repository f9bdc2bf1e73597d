"""``deepedge workload check FILE|NAME`` and ``deepedge workload schema [DIR]``.

``check`` builds the workload as every entry point would (imports the model, freezes its
layers, reads the first image, one forward pass, the labeller) and prints its summary as
JSON; a bad workload is one ``error:`` line naming the field, exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from deepedge.cli.app import echo_json, group, run_guarded

workload_app = group("workload")


@workload_app.command("check")
def check(
    workload: str = typer.Argument(..., help="workload document or bundled name"),
) -> None:
    """Build and check a workload; print its classes, parameters and windows (JSON)."""

    def go() -> None:
        from deepedge.workload.check import summary

        echo_json(summary(workload))

    run_guarded(go)


@workload_app.command("schema")
def schema(
    out_dir: Path = typer.Argument(Path("docs/schemas"), help="folder to write the schema to"),
) -> None:
    """Write workload.schema.json (the JSON Schema of the workload document)."""
    from deepedge.workload.spec import workload_schema

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "workload.schema.json"
    path.write_text(json.dumps(workload_schema(), indent=2, sort_keys=True) + "\n")
    typer.echo(f"wrote {path}")
