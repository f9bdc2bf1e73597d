"""``deepedge agent`` / ``deepedge nodes``: bad input is refused before any Ray starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["agent", "--device-type", "jetson-xavier"], "unknown --device-type"),
        (["agent", "--device-type", "jetson-nano", "--app", "sift"], "kind:deadline_s"),
        (["agent", "--device-type", "jetson-nano", "--heartbeat-s", "nan"], "--heartbeat-s"),
        (["agent", "--device-type", "jetson-nano"], "--address"),  # no cluster named
        (
            [
                "agent",
                "--device-type",
                "jetson-nano",
                "--address",
                "10.0.0.1:6379",
                "--heartbeat-s",
                "2",
                "--lost-after-s",
                "1",
            ],
            "heartbeat_s < lost_after_s",
        ),
        (["nodes"], "--address"),
        (["profile-node", "--id", "n1", "--out", "models"], "--address"),
        (["update", "--workload", "digits"], "give --cluster, or --address"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, env={"RAY_ADDRESS": ""})
    assert result.exit_code == 2, result.output
    assert message in result.output
