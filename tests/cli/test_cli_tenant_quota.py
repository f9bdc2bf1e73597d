"""``deepedge tenants create|update --max-disk-mb``: a tenant's disk quota is set, changed,
listed, and refused when it is no size at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.service.disk_quota import DEFAULT_MAX_DISK_MB

runner = CliRunner()


def _json(*args: str) -> dict[str, object]:
    done = runner.invoke(app, [*args, "-o", "json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("create", "update", "expected"),
    [([], [], DEFAULT_MAX_DISK_MB), (["--max-disk-mb", "64"], [], 64),
     (["--max-disk-mb", "64"], ["--max-disk-mb", "256"], 256), ([], ["--max-disk-mb", "1"], 1)],
)  # fmt: skip
def test_a_tenants_disk_quota_is_set_and_changed(
    tmp_path: Path, create: list[str], update: list[str], expected: int
) -> None:
    data = str(tmp_path / "data")
    created = _json("tenants", "create", "alice", "--data-dir", data, *create)
    assert created["max_disk_mb"] == (64 if create else DEFAULT_MAX_DISK_MB)
    updated = _json("tenants", "update", "alice", "--data-dir", data, *update)
    assert updated["max_disk_mb"] == expected
    (listed,) = _json("tenants", "list", "--data-dir", data)["tenants"]  # type: ignore[misc]
    assert listed["max_disk_mb"] == expected
    table = runner.invoke(app, ["tenants", "list", "--data-dir", data]).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[-2:] == ["DISK", "MB"] and row.split()[-1] == str(expected)


@pytest.mark.parametrize("command", [["create", "bob"], ["update", "bob"]])
def test_a_quota_of_no_size_is_refused(tmp_path: Path, command: list[str]) -> None:
    data = str(tmp_path / "data")
    if command[0] == "update":
        _json("tenants", "create", "bob", "--data-dir", data)
    done = runner.invoke(app, ["tenants", *command, "--data-dir", data, "--max-disk-mb", "0"])
    assert done.exit_code == 2
    assert "max-disk-mb" in done.output
