"""A deployment's model-update job: the executor it names, and the phases read back."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.update_jobs import model_update_job, update_phases
from deepedge.service.learner import ModelUpdateSpec
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
