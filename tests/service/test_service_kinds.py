"""deepedge's own job kinds run their engines as learners; a missing engine is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _service_helpers import tick_until
from pydantic import ValidationError

from deepedge.service import learner
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Manager
from deepedge.service.manifest import JobKind, parse_manifest
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("example", "result_key"), [("ekya-window.yaml", "streams"), ("placement.yaml", "status")]
)
def test_planner_kinds_run_to_a_stored_decision(
    settings: ServiceSettings, sqlite_store: JobStore, example: str, result_key: str
) -> None:
    manifest = parse_manifest(yaml.safe_load((EXAMPLES / example).read_text()))
    job, _ = sqlite_store.submit(sqlite_store.create_tenant("a", "t"), manifest)
    manager = Manager(sqlite_store, settings)
    done = {JobStatus.COMPLETED, JobStatus.FAILED}
    assert tick_until(manager, lambda: sqlite_store.get(job.id).status in done, 120)
    finished = sqlite_store.get(job.id)
    assert finished.status is JobStatus.COMPLETED, finished.error_message
    result = json.loads((manager.job_dir(job).results / "result.json").read_text())
    assert result_key in result


@pytest.mark.parametrize(
    ("kind", "document"),
    [
        (JobKind.MODEL_UPDATE, {"epochs": 0}),
        (JobKind.MODEL_UPDATE, {"surprise": 1}),
        (JobKind.PLACEMENT, {"nodes": "many"}),
        (JobKind.EKYA_WINDOW, {}),
    ],
)
def test_kind_documents_are_validated_by_their_engine(
    kind: JobKind, document: dict[str, object]
) -> None:
    with pytest.raises(ValidationError):
        learner.validate_document(kind, document)


def test_a_missing_engine_is_reported_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = learner.Engine("deepedge.planning.nowhere", "solve", lambda: learner.ModelUpdateSpec,
                             lambda entry, doc: None)  # fmt: skip
    monkeypatch.setitem(learner.ENGINES, JobKind.PLACEMENT, missing)
    reason = learner.kind_unavailable_reason(JobKind.PLACEMENT)
    assert reason is not None and "deepedge.planning.nowhere" in reason
    assert learner.kind_unavailable_reason(JobKind.COMMAND) is None
