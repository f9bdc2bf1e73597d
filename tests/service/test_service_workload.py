"""The service's ``model-update`` kind on a user's workload: 422 when bad, trained when good."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _service_helpers import tick_until

from deepedge.core.errors import InvalidInputError
from deepedge.service import learner
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Manager
from deepedge.service.manifest import JobKind, parse_manifest
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore


def _manifest(document: dict[str, object]) -> dict[str, object]:
    return {
        "name": "site-update",
        "kind": "model-update",
        "resources": {"cpus": 2, "mem_mb": 1048576},
        "spec": {"document": document},
    }


def test_a_bad_workload_is_refused_naming_its_field(user_workload: Callable[..., Path]) -> None:
    path = user_workload(frozen={"prefixes": ["backbone"]})
    document = learner.validate_document(JobKind.MODEL_UPDATE, {"workload": str(path)})
    with pytest.raises(InvalidInputError) as info:
        learner.deep_check(JobKind.MODEL_UPDATE, document)
    assert info.value.field == "workload.frozen.prefixes"
    assert "backbone" in info.value.message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("executor", "runs"), [("auto", "threads"), pytest.param("ray", "ray", marks=pytest.mark.ray)]
)
def test_a_model_update_job_trains_a_user_workload(
    settings: ServiceSettings,
    sqlite_store: JobStore,
    user_workload: Callable[..., Path],
    executor: str,
    runs: str,
) -> None:
    path = user_workload(frozen={"prefixes": []})
    spec = json.loads(path.read_text())
    # an inline document: paths absolute, as on a service host
    spec["python_path"] = [str(path.parent / "site")]
    spec["data"]["root"] = str(path.parent / "images")
    document = {"workload": spec, "epochs": 4, "seed": 1, "executor": executor}
    learner.deep_check(
        JobKind.MODEL_UPDATE, learner.validate_document(JobKind.MODEL_UPDATE, document)
    )
    job, _ = sqlite_store.submit(
        sqlite_store.create_tenant("a", "t", grants=spec["python_path"] + [spec["data"]["root"]]),
        parse_manifest(_manifest(document)),
    )
    manager = Manager(sqlite_store, settings)
    done = {JobStatus.COMPLETED, JobStatus.FAILED}
    assert tick_until(manager, lambda: sqlite_store.get(job.id).status in done, 240)
    finished = sqlite_store.get(job.id)
    assert finished.status is JobStatus.COMPLETED, finished.error_message
    result = json.loads((manager.job_dir(job).results / "result.json").read_text())
    assert result["workload"] == "site-cameras" and result["executor"] == runs
    assert set(result["phases_s"]) == {"start", "plan", "train", "write"}
    assert result["window"] == 2 and result["train_size"] == 13
    # (a handful of held-out images: chance before, and a few epochs of asynchronous
    # training may leave a tie; the update must not make the model worse)
    assert result["metric_after"] >= result["metric_before"]
    # Every epoch is a metric sample; the log is the learner's own, its attempts timestamped
    # for people, and none of Ray's start-up advice (that goes to the debug log).
    samples = [
        json.loads(line) for line in manager.job_dir(job).metrics_file.read_text().splitlines()
    ]
    assert [s["epoch"] for s in samples] == list(range(1, len(samples) + 1)) and samples
    assert all(0.0 <= s["accuracy"] <= 1.0 and s["epoch_s"] > 0 for s in samples)
    log = manager.job_dir(job).log_file(0).read_text()
    assert re.match(r"=== attempt 0 started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ", log)
    assert "File descriptor limit" not in log and "Token authentication" not in log


def test_an_ekya_window_document_with_a_workload_is_a_live_run(
    user_workload: Callable[..., Path],
) -> None:
    good = learner.validate_document(JobKind.EKYA_WINDOW, {"workload": str(user_workload())})
    assert isinstance(good, learner.EkyaRunSpec) and good.windows == 2
    learner.deep_check(JobKind.EKYA_WINDOW, good)
    bad = {"workload": str(user_workload(input={"size": [12, 12], "channels": 1}))}
    with pytest.raises(InvalidInputError) as info:
        learner.deep_check(JobKind.EKYA_WINDOW, learner.validate_document(JobKind.EKYA_WINDOW, bad))
    assert info.value.field == "workload.input"


def test_the_example_workload_job_is_valid() -> None:
    import yaml

    path = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "model-update-workload.yaml"
    manifest = parse_manifest(yaml.safe_load(path.read_text()))
    assert manifest.kind is JobKind.MODEL_UPDATE
    document = learner.validate_document(JobKind.MODEL_UPDATE, manifest.spec.document)
    assert document.workload == "resnet-photos" and document.window == 3
    learner.deep_check(JobKind.MODEL_UPDATE, document)
