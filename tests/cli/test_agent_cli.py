"""``deepedge agent`` / ``deepedge nodes --address``: bad input is refused before any Ray
starts (``deepedge nodes`` without an address asks the service: tests/cli/test_cli_nodes.py)."""

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
        (["profile-node", "--id", "n1", "--out", "models"], "--address"),
        (["update", "--workload", "digits"], "give --cluster, or --address"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, env={"RAY_ADDRESS": ""})
    assert result.exit_code == 2, result.output
    assert message in result.output


def _unused_loopback_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [
        ["nodes"],
        ["agent", "--device-type", "jetson-nano", "--id", "nano-1", "--no-join"],
        ["agent", "--device-type", "jetson-nano", "--id", "nano-1"],  # would join: not started
        ["profile-node", "--id", "nano-1", "--out", "models"],
        ["update", "--workload", "digits", "--ps-node", "head"],
    ],
)
def test_a_wrong_address_fails_fast_with_one_line_and_exit_8(args: list[str]) -> None:
    """Nothing listens there: one line naming the address and what was tried, no
    traceback, and Ray was never asked (it would retry for minutes)."""
    import ray

    address = f"127.0.0.1:{_unused_loopback_port()}"
    result = runner.invoke(app, [*args, "--address", address], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 8, result.output
    (line,) = [x for x in result.output.splitlines() if f"no Ray cluster at {address}" in x]
    assert "TCP connection to 127.0.0.1 port" in line and "refused" in line
    assert "Traceback" not in result.output
    assert not ray.is_initialized()


@pytest.mark.parametrize("address", ["head-without-port", "10.0.0.1:http", "10.0.0.1:70000"])
def test_an_address_that_is_not_host_port_exits_2(address: str) -> None:
    result = runner.invoke(app, ["nodes", "--address", address], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 2, result.output
    assert "is not HOST:PORT" in result.output


def test_a_node_id_that_cannot_label_a_raylet_exits_2() -> None:
    args = ["agent", "--device-type", "jetson-nano", "--id", "nano 1", "--address", "1.2.3.4:1"]
    result = runner.invoke(app, args, env={"RAY_ADDRESS": ""})
    assert result.exit_code == 2, result.output
    assert "node id 'nano 1'" in result.output
