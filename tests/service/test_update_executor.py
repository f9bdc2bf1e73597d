"""A model-update job's executor: chosen by its document, and threads start no Ray."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from pydantic import ValidationError

from deepedge.core.errors import InvalidInputError
from deepedge.service import learner
from deepedge.service.manifest import JobKind
from deepedge.service.update_executor import ExecutorChoice, resolve_executor

RAY_PROCESSES = ("raylet", "gcs_server", "plasma_store", "ray::")


@pytest.mark.parametrize(
    ("choice", "live", "runs"),
    [
        (ExecutorChoice.AUTO, False, "threads"),
        (ExecutorChoice.AUTO, True, "ray"),
        (ExecutorChoice.RAY, False, "ray"),
        (ExecutorChoice.RAY, True, "ray"),
        (ExecutorChoice.THREADS, False, "threads"),
        (ExecutorChoice.THREADS, True, None),  # refused
    ],
)
def test_the_document_chooses_the_executor(
    choice: ExecutorChoice, live: bool, runs: str | None
) -> None:
    if runs is None:
        with pytest.raises(InvalidInputError) as raised:
            resolve_executor(choice, live)
        assert raised.value.field == "executor"
        return
    assert resolve_executor(choice, live) == runs


@pytest.mark.parametrize(
    ("document", "valid"),
    [
        ({}, True),  # auto
        ({"executor": "threads"}, True),
        ({"executor": "ray"}, True),
        ({"executor": "processes"}, False),
        ({"executor": "threads", "live_cluster": True, "workload": "digits"}, False),
        ({"executor": "ray", "live_cluster": True, "workload": "digits"}, True),
    ],
)
def test_a_job_document_names_a_known_executor_that_can_run_it(
    document: dict[str, object], valid: bool
) -> None:
    if valid:
        learner.validate_document(JobKind.MODEL_UPDATE, document)
    else:
        with pytest.raises(ValidationError, match="executor"):
            learner.validate_document(JobKind.MODEL_UPDATE, document)


def _ray_descendants(root: psutil.Process) -> set[str]:
    found: set[str] = set()
    try:
        children = root.children(recursive=True)
    except psutil.Error:
        return found
    for child in children:
        try:
            text = " ".join([child.name(), *child.cmdline()])
        except psutil.Error:
            continue
        found.update(name for name in RAY_PROCESSES if name in text)
    return found


@pytest.mark.slow
def test_a_model_update_learner_on_threads_starts_no_ray(tmp_path: Path) -> None:
    """The learner's own command line (``learner_argv``) on a digits update: no Ray module
    is imported (``-X importtime`` lists every import) and no raylet, GCS or Ray worker
    process appears under it, and the result says what ran and how long each phase took."""
    document = tmp_path / "document.json"
    document.write_text(json.dumps({"dataset_size": 300, "epochs": 3, "seed": 0}))
    results, work = tmp_path / "results", tmp_path / "work"
    work.mkdir()
    argv = learner.learner_argv(JobKind.MODEL_UPDATE, document, results)
    env = {**os.environ, "DEEPEDGE_RESULTS_DIR": str(results),
           "DEEPEDGE_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    seen: set[str] = set()
    log = tmp_path / "learner.log"  # a file: the import listing would fill a pipe
    with (
        log.open("w") as out,
        subprocess.Popen(
            [argv[0], "-X", "importtime", *argv[1:]], cwd=work, env=env, stdout=out, stderr=out
        ) as proc,
    ):
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            seen |= _ray_descendants(root)
            time.sleep(0.05)
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-2000:]
    assert seen == set()
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "torch" in imported  # (the listing is complete: it holds what the update uses)
    assert not {m for m in imported if m == "ray" or m.startswith("ray.")}
    result = json.loads((results / "result.json").read_text())
    assert result["executor"] == "threads"
    assert set(result["phases_s"]) == {"start", "plan", "train", "write"}
    assert all(v >= 0 for v in result["phases_s"].values())
    assert result["runtime_start_s"] < result["phases_s"]["start"]
    assert 1 <= len(result["accuracies"]) <= 3  # the document's epochs bound the update
    assert (results / "model.pt").exists()
    assert "started a local Ray" not in stderr
    assert "model-update finished" in stderr  # the fast exit flushed its log
