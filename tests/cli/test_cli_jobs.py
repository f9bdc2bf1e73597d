"""The ``deepedge jobs`` client and ``deepedge tenants create`` against a real server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.api.local_server import ServerProcess
from deepedge.cli import app
from deepedge.service.config import ServiceSettings

runner = CliRunner()


@pytest.mark.slow
def test_jobs_client_round_trip(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = runner.invoke(
        app, ["tenants", "create", "alice", "--data-dir", str(data), "-o", "json"]
    )
    assert created.exit_code == 0, created.output
    token = json.loads(created.stdout)["token"]
    assert token.startswith("dpe_")
    server = ServerProcess(ServiceSettings(data_dir=data))
    server.start()
    env = {"DEEPEDGE_URL": server.url, "DEEPEDGE_TOKEN": token}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "name: cli-demo\nkind: command\nresources: {cpus: 0.5}\nspec:\n  argv: ["
        f"{sys.executable}, -m, deepedge.service.demo_learner, --steps, '3', --step-s, '0.02']\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nkind: command\nspec: {argv: [x], cwd: ../../etc}\n")
    try:
        submitted = runner.invoke(app, ["jobs", "submit", str(manifest), "-o", "json"], env=env)
        assert submitted.exit_code == 0, submitted.output
        job_id = json.loads(submitted.stdout)["id"]
        followed = runner.invoke(app, ["jobs", "logs", job_id, "--follow"], env=env)
        assert "done after 3 steps" in followed.stdout
        status = json.loads(
            runner.invoke(app, ["jobs", "status", job_id, "-o", "json"], env=env).stdout
        )
        assert status["status"] in {"STORING", "COMPLETED"}
        listed = json.loads(runner.invoke(app, ["jobs", "list", "-o", "json"], env=env).stdout)
        assert [j["id"] for j in listed["jobs"]] == [job_id]
        first = json.loads(
            runner.invoke(app, ["jobs", "list", "--limit", "1", "-o", "json"], env=env).stdout
        )
        page = ["jobs", "list", "--before", str(first["next_before"]),
                "--before-id", first["next_before_id"], "-o", "json"]  # fmt: skip
        assert json.loads(runner.invoke(app, page, env=env).stdout)["jobs"] == []
        metrics = json.loads(
            runner.invoke(app, ["jobs", "metrics", job_id, "-o", "json"], env=env).stdout
        )
        assert metrics["samples"][-1]["step"] == 3
        rejected = runner.invoke(app, ["jobs", "submit", str(bad)], env=env)
        assert rejected.exit_code == 2 and "spec.cwd" in rejected.stderr
        assert "Traceback" not in rejected.output
        missing = runner.invoke(app, ["jobs", "status", "0" * 32], env=env)
        assert missing.exit_code == 4
        wrong = runner.invoke(app, ["jobs", "list"], env={**env, "DEEPEDGE_TOKEN": "nope"})
        assert wrong.exit_code == 7
        conflict = runner.invoke(app, ["jobs", "resume", job_id], env=env)
        assert conflict.exit_code == 5
        deleted = runner.invoke(app, ["jobs", "delete", job_id], env=env)
        assert deleted.exit_code == 0
    finally:
        server.stop()
