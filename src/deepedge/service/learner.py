"""The learner the service runs for deepedge's own job kinds.

``python -m deepedge.service.learner --kind K --document D --results R`` validates the kind's
document with the engine's own model, runs the engine, and writes the decision (or the update
report) to ``R/result.json``. A kind whose engine is not installed is refused at deploy time
with a message naming it (:func:`kind_unavailable_reason`), never faked.

Engines (public entry points):

* ``ekya-window``: ``deepedge.planning.thief.ThiefScheduler().plan(WindowProblem)``
* ``placement``: ``deepedge.planning.placement.solve(PlacementProblem)``
* ``model-update``: ``deepedge.runtime.update.run_update(document, checkpoint_dir, resume_from)``
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepedge.service.manifest import JobKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Engine:
    module: str
    attribute: str
    run: Callable[[Any, dict[str, Any]], Any]


def _run_window(entry: Any, document: dict[str, Any]) -> Any:
    from deepedge.planning.window import WindowProblem

    return entry().plan(WindowProblem.model_validate(document))


def _run_placement(entry: Any, document: dict[str, Any]) -> Any:
    from deepedge.planning.placement_model import PlacementProblem

    return entry(PlacementProblem.model_validate(document))


def _run_update(entry: Any, document: dict[str, Any]) -> Any:
    resume = os.environ.get("DEEPEDGE_RESUME_FROM")
    return entry(
        document,
        checkpoint_dir=Path(os.environ.get("DEEPEDGE_CHECKPOINT_DIR", "checkpoints")),
        resume_from=Path(resume) if resume else None,
    )


ENGINES: dict[JobKind, Engine] = {
    JobKind.EKYA_WINDOW: Engine("deepedge.planning.thief", "ThiefScheduler", _run_window),
    JobKind.PLACEMENT: Engine("deepedge.planning.placement", "solve", _run_placement),
    JobKind.MODEL_UPDATE: Engine("deepedge.runtime.update", "run_update", _run_update),
}


def kind_unavailable_reason(kind: JobKind) -> str | None:
    """None when the kind can run here, else a message naming what is missing."""
    if kind is JobKind.COMMAND:
        return None
    engine = ENGINES[kind]
    try:
        found = importlib.util.find_spec(engine.module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return (
            f"job kind {kind.value!r} is unavailable: its engine {engine.module} is not installed"
        )
    try:
        module = importlib.import_module(engine.module)
    except Exception as exc:
        return f"job kind {kind.value!r} is unavailable: importing {engine.module} failed: {exc}"
    if not hasattr(module, engine.attribute):
        return f"job kind {kind.value!r} is unavailable: {engine.module} has no {engine.attribute}"
    return None


def learner_argv(kind: JobKind, document: Path, results: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "deepedge.service.learner",
        "--kind",
        kind.value,
        "--document",
        str(document),
        "--results",
        str(results),
    ]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-learner")
    parser.add_argument("--kind", required=True, choices=[k.value for k in ENGINES])
    parser.add_argument("--document", required=True, type=Path)
    parser.add_argument("--results", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kind = JobKind(args.kind)
    reason = kind_unavailable_reason(kind)
    if reason is not None:
        log.error("%s", reason)
        return 3
    engine = ENGINES[kind]
    entry = getattr(importlib.import_module(engine.module), engine.attribute)
    document = json.loads(args.document.read_text())
    result = engine.run(entry, document)
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / "result.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(_jsonable(result), indent=2, default=str))
    os.replace(tmp, out)
    log.info("%s finished; result in %s", kind.value, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
