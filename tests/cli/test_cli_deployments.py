"""``deepedge deploy`` and ``deepedge deployments`` / ``models versions`` against a real
server process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _support import wait_until
from deepedge.api.local_server import ServerProcess, make_tenant
from deepedge.cli import app
from deepedge.service.config import ServiceSettings

runner = CliRunner()
SPEC = """\
name: line-1
labeller: ground-truth
window_s: 3600
stream: {window_size: 100}
"""


@pytest.mark.slow
def test_deploy_list_show_rollback_and_versions(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, user_workload: Callable[..., Path]
) -> None:
    # alice's workload folder is granted to her sandboxes (readable by their user), and
    # lies apart from the service's data folder, as a grant must
    settings = ServiceSettings(data_dir=tmp_path_factory.mktemp("service"))
    tmp_path.chmod(0o755)
    make_tenant(settings, "alice", "tok-alice", grants=(str(tmp_path),))
    server = ServerProcess(settings)
    server.start()
    env = {"DEEPEDGE_URL": server.url, "DEEPEDGE_TOKEN": "tok-alice"}
    spec = tmp_path / "line.yaml"
    spec.write_text(SPEC)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntarget: {nodes: [pi-9]}\n")
    try:
        deployed = runner.invoke(app, ["deploy", str(spec)], env=env)
        assert deployed.exit_code == 0, deployed.output
        assert "line-1" in deployed.stdout
        rejected = runner.invoke(app, ["deploy", str(bad)], env=env)
        assert rejected.exit_code == 2 and "target" in rejected.stderr

        def scored() -> bool:
            listed = runner.invoke(app, ["deployments", "list", "-o", "json"], env=env)
            return bool(json.loads(listed.stdout)["deployments"][0]["window"] >= 0)

        assert wait_until(scored, 120, interval_s=0.2)
        table = runner.invoke(app, ["deployments", "list"], env=env)
        assert table.exit_code == 0 and "line-1" in table.stdout and "ACTIVE" in table.stdout
        shown = runner.invoke(app, ["deployments", "show", "line-1"], env=env)
        assert shown.exit_code == 0 and "v1" in shown.stdout and "promoted" in shown.stdout
        versions = runner.invoke(app, ["models", "versions", "-o", "json"], env=env)
        assert [v["status"] for v in json.loads(versions.stdout)["versions"]] == ["SERVING"]
        nothing = runner.invoke(app, ["deployments", "rollback", "line-1"], env=env)
        assert nothing.exit_code == 5 and "nothing to go back to" in nothing.stderr
        missing = runner.invoke(app, ["deployments", "show", "nope"], env=env)
        assert missing.exit_code == 4
        model = tmp_path / "v1.pt"
        pulled = runner.invoke(
            app, ["deployments", "download", "line-1", "1", "--out", str(model)], env=env
        )
        assert pulled.exit_code == 0 and "wrote" in pulled.stdout, pulled.output
        _loads_into_the_edge_cnn(model)
        stopped = runner.invoke(app, ["deployments", "stop", "line-1"], env=env)
        assert stopped.exit_code == 0 and "STOPPED" in stopped.stdout
        # Deletion asks for the name; a wrong answer keeps it, the right one deletes it.
        kept = runner.invoke(app, ["deployments", "delete", "line-1"], env=env, input="line\n")
        assert kept.exit_code == 5 and "not deleted" in kept.stderr
        gone = runner.invoke(app, ["deployments", "delete", "line-1"], env=env, input="line-1\n")
        assert gone.exit_code == 0 and "deleted" in gone.stdout, gone.output
        missing = runner.invoke(app, ["deployments", "delete", "line-1", "--yes"], env=env)
        assert missing.exit_code == 4
        spec.write_text(SPEC.replace("3600", "1800"))  # the same name with a changed spec
        again = runner.invoke(app, ["deploy", str(spec)], env=env)
        assert again.exit_code == 0, again.output
        assert (
            runner.invoke(app, ["deployments", "delete", "line-1", "--yes"], env=env).exit_code == 0
        )
        # A user's workload file, relative to the deployment file: sent as an absolute path.
        workload = user_workload()
        (tmp_path / "deploy").mkdir()
        cams = tmp_path / "deploy" / "cams.yaml"
        cams.write_text("name: cams\nworkload: ../workload.json\nwindow_s: 3600\n")
        deployed = runner.invoke(app, ["deploy", str(cams)], env=env)
        assert deployed.exit_code == 0, deployed.output
        listed = json.loads(
            runner.invoke(app, ["deployments", "list", "-o", "json"], env=env).stdout
        )
        assert {d["name"]: d["workload"] for d in listed["deployments"]}["cams"] == str(workload)
        assert runner.invoke(app, ["deployments", "stop", "cams"], env=env).exit_code == 0
    finally:
        server.stop()


def _loads_into_the_edge_cnn(path: Path) -> None:
    import torch

    from deepedge.learning.models import make_edge_model

    state = torch.load(path, weights_only=True)
    make_edge_model(10, 16, 8).load_state_dict(state)
