"""Manifest validation and path containment (no manifest path may leave its job directory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from deepedge.core.errors import InvalidInputError
from deepedge.service.manifest import JobKind, check_relative_path, parse_manifest
from deepedge.service.workspace import JobDir, Workspace

VALID = {"name": "job-1", "kind": "command", "spec": {"argv": ["echo", "hi"]}}


def _with(**changes: object) -> dict[str, object]:
    return {**VALID, **changes}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        (_with(name=""), "name"),
        (_with(name="../evil"), "name"),
        (_with(kind="tensorflow-magic"), "kind"),
        (_with(learners=0), "learners"),
        (_with(resources={"cpus": -1}), "resources.cpus"),
        (_with(checkpoint_interval_s=0), "checkpoint_interval_s"),
        (_with(spec={"argv": []}), "spec.CommandSpec.argv"),
        (_with(spec={"argv": ["x"], "cwd": "../.."}), "spec.CommandSpec.cwd"),
        (_with(spec={"argv": ["x"], "cwd": "/etc"}), "spec.CommandSpec.cwd"),
        (_with(spec={"argv": ["x"], "env": {"DEEPEDGE_JOB_ID": "x"}}), "spec.CommandSpec.env"),
        (_with(data={"source": "../../secrets"}), "data.source"),
        (_with(data={"source": "builtin:imagenet"}), "data.source"),
        (_with(unknown=1), "unknown"),
        (_with(spec="rm -rf /"), "spec"),
    ],
)
def test_invalid_manifests_name_the_field(document: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_manifest(document)
    locations = {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}
    assert any(loc.startswith(field) for loc in locations), locations


@pytest.mark.parametrize(
    ("kind", "spec", "ok"),
    [
        ("command", {"argv": ["x"]}, True),
        ("command", {"document": {}}, False),
        ("placement", {"document": {"a": 1}}, True),
        ("placement", {"argv": ["x"]}, False),
    ],
)
def test_spec_shape_must_match_kind(kind: str, spec: dict[str, object], ok: bool) -> None:
    document = {"name": "j", "kind": kind, "spec": spec}
    if ok:
        assert parse_manifest(document).kind is JobKind(kind)
    else:
        with pytest.raises(ValidationError, match="spec"):
            parse_manifest(document)


@settings(deadline=None)  # timing on a shared machine is not what is tested
@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "/"]), min_size=1, max_size=8))
def test_accepted_relative_paths_never_escape(parts: list[str]) -> None:
    raw = "/".join(parts)
    try:
        clean = check_relative_path(raw)
    except ValueError:
        return
    root = Path("/root-of-job")
    assert (root / clean).resolve().is_relative_to(root)


def test_symlink_out_of_the_job_directory_is_rejected(tmp_path: Path) -> None:
    job_dir = Workspace(tmp_path).job_dir("tenant1", "job1")
    job_dir.create()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, job_dir.work / "link")
    assert job_dir.resolve_inside("sub/dir").is_relative_to(job_dir.work)
    with pytest.raises(InvalidInputError, match="escapes"):
        job_dir.resolve_inside("link")
    with pytest.raises(InvalidInputError):
        job_dir.resolve_inside("../status")


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x y"])
def test_workspace_ids_must_be_plain(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInputError):
        Workspace(tmp_path).job_dir(bad, "job1")


def test_job_dir_layout(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "j")
    job_dir.create()
    assert all(p.is_dir() for p in (job_dir.work, job_dir.logs, job_dir.checkpoints))
    assert job_dir.exit_file(1, 2).name == "learner-1-2.exit"


def test_committed_manifest_schema_is_current() -> None:
    import json

    from deepedge.service.manifest import manifest_schema

    committed = Path(__file__).resolve().parents[2] / "docs/schemas/job-manifest.schema.json"
    assert json.loads(committed.read_text()) == manifest_schema()
