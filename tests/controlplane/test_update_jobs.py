"""A deployment's model-update job: the executor it names, and the phases read back."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.update_jobs import job_ended, model_update_job, update_phases
from deepedge.service.learner import ModelUpdateSpec
from deepedge.service.records import HistoryEntry, JobId, JobRecord, TenantId
from deepedge.service.status import JobStatus
from deepedge.service.update_executor import resolve_executor


def spec(**fields: Any) -> DeploymentSpec:
    return DeploymentSpec.model_validate({"name": "line", **fields})


@pytest.mark.parametrize(
    ("target", "update", "in_document", "runs"),
    [
        ({}, {}, None, "threads"),  # the default: no key, the job's own auto
        ({}, {"executor": "ray"}, "ray", "ray"),
        ({}, {"executor": "threads"}, "threads", "threads"),
        ({"live": True, "nodes": ["n1"]}, {}, None, "ray"),
        ({"live": True, "nodes": ["n1"]}, {"executor": "ray"}, "ray", "ray"),
    ],
)
def test_the_update_job_runs_on_the_executor_the_deployment_names(
    target: dict[str, Any], update: dict[str, Any], in_document: str | None, runs: str
) -> None:
    document = model_update_job(spec(target=target, update=update), 300)
    assert document.get("executor") == in_document
    job = ModelUpdateSpec.model_validate(document)
    assert resolve_executor(job.executor, job.live_cluster) == runs


def test_the_site_model_trains_with_the_deployments_rate_and_schedule() -> None:
    document = model_update_job(spec(update={"learning_rate": 0.2, "momentum": 0.5}), 300)
    assert (document["lr"], document["momentum"], document["lr_schedule"]) == (0.2, 0.5, "cosine")
    job = ModelUpdateSpec.model_validate(document)
    assert (job.lr, job.momentum, job.lr_schedule) == (0.2, 0.5, "cosine")
    constant = model_update_job(spec(update={"lr_schedule": "constant"}), 300)
    assert ModelUpdateSpec.model_validate(constant).lr_schedule == "constant"
    with pytest.raises(ValidationError, match="lr_schedule"):
        spec(update={"lr_schedule": "step"})


def test_an_update_trains_its_min_epochs_before_the_stop_rule_may_end_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm start's validation curve is flat at first (the serving version is already
    near its plateau), so the stop rule's first fit would end it after three epochs, before
    the new data taught it; the deployment's ``update.min_epochs`` reaches the job's rule."""
    from deepedge.service import learner

    document = model_update_job(spec(update={"epochs": 6, "min_epochs": 5}), 60)
    assert document["min_epochs"] == 5
    assert model_update_job(spec(update={"epochs": 4}), 60)["min_epochs"] == 4  # at most
    # the defaults: the site's edge CNN learns a window's few hundred labels in more passes;
    # a user's workload keeps the ten it had (its training section says the rest)
    site = model_update_job(spec(), 60)
    assert (site["epochs"], site["min_epochs"]) == (30, 30)
    user = spec().update.epoch_bounds(user_workload=True)
    assert user == (10, 10)
    job = ModelUpdateSpec.model_validate({**document, "train_data": None,
                                          "initial_weights": None, "dataset_size": 60})
    seen: list[Any] = []

    def entry(*args: Any, config: Any, **kwargs: Any) -> Any:
        seen.append(config.stopping)
        raise RuntimeError("stop here")

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match="stop here"):
        learner._run_update(entry, job)
    assert (seen[0].min_epochs, seen[0].max_epochs) == (5, 6)


def test_a_live_deployment_cannot_ask_for_threads() -> None:
    with pytest.raises(ValidationError, match="executor threads cannot run a live_cluster"):
        spec(target={"live": True, "nodes": ["n1"]}, update={"executor": "threads"})


@pytest.mark.parametrize(
    ("result", "phases"),
    [
        ({"phases_s": {"start": 1.5, "plan": 0.01, "train": 4, "write": 0.2}},
         {"start": 1.5, "plan": 0.01, "train": 4.0, "write": 0.2}),
        ({}, {}),  # a job of an older deepedge
        ({"phases_s": [1, 2]}, {}),
        # tenant code wrote the file: only finite numbers are phases
        ({"phases_s": {"start": "soon", "plan": math.inf, "train": True, "write": 0}},
         {"write": 0.0}),
    ],
)  # fmt: skip
def test_the_phases_are_read_back_as_finite_seconds(
    result: dict[str, Any], phases: dict[str, float]
) -> None:
    assert update_phases(result) == phases


def _ended(status: JobStatus, error: str | None) -> JobRecord:
    return JobRecord(
        id=JobId("j" * 32), tenant_id=TenantId("t"), name="update", kind="model-update",
        manifest_json="{}", status=status, version=3, created_at=0.0, updated_at=1.0,
        error_code=None if error is None else "LEARNER_FAILED", error_message=error,
        requested_action=None, restarts=0, deploy_attempts=1, next_attempt_at=0.0,
    )  # fmt: skip


HISTORY = (
    HistoryEntry(1, JobStatus.QUEUED, None, 0.0),
    HistoryEntry(2, JobStatus.PROCESSING, "learners started", 0.5),
    HistoryEntry(3, JobStatus.HALTED, "halted by the user", 1.0),
)


@pytest.mark.parametrize(
    ("status", "error", "history", "said"),
    [
        (JobStatus.FAILED, "learner 0 exited 1", HISTORY, "FAILED: learner 0 exited 1"),
        (JobStatus.HALTED, None, HISTORY, "HALTED: halted by the user"),  # its cause, no None
        (JobStatus.HALTED, None, HISTORY[:2], "HALTED"),  # no reason known: nothing more
        (JobStatus.FAILED, "", HISTORY[:1], "FAILED"),
    ],
)
def test_a_job_that_ended_without_a_result_says_why_or_nothing(
    status: JobStatus, error: str | None, history: tuple[HistoryEntry, ...], said: str
) -> None:
    text = job_ended(_ended(status, error), history)
    assert text == f"job {'j' * 32} {said}"
    assert "None" not in text
