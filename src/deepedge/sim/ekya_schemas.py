"""JSON Schemas of the Ekya documents: ``python -m deepedge.sim.ekya_schemas DIR``.

Writes ``ekya-window.schema.json`` (planner input), ``ekya-plan.schema.json`` (planner output)
and ``ekya-trace.schema.json`` (simulator profile) into ``DIR``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from deepedge.planning.window.documents import WindowPlan, WindowProblem
from deepedge.sim.trace import EkyaTrace


def ekya_schemas() -> dict[str, dict[str, Any]]:
    """File name -> JSON Schema."""
    return {
        "ekya-window.schema.json": WindowProblem.model_json_schema(),
        "ekya-plan.schema.json": WindowPlan.model_json_schema(),
        "ekya-trace.schema.json": EkyaTrace.model_json_schema(),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_ekya_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in ekya_schemas().items():
        path = directory / name
        path.write_text(render(schema))
        written.append(path)
    return written


if __name__ == "__main__":
    write_ekya_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas"))
