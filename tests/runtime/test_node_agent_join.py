"""The ``ray start`` an agent runs to join: its output goes to a file beside the debug log,
never to the agent's terminal (Ray's banner there tells the operator to run ``ray stop``,
which stops every Ray of the machine); a ``ray start`` that exits is refused with its last
line. A stand-in ``ray`` command plays Ray's part: no Ray starts here."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from deepedge.core.errors import DependencyUnavailableError
from deepedge.runtime.cluster import node_agent, ray_logs
from deepedge.runtime.cluster.session import node_resource

BANNER = """\
echo "Ray runtime started."
echo "To terminate the Ray runtime, run"
echo "  ray stop"
"""


def stand_in(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "ray"
    script.write_text("#!/bin/sh\n" + f'echo "$@" > "{tmp_path}/args"\n' + BANNER + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def debug_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state" / "debug.log"
    monkeypatch.setenv(ray_logs.DEBUG_LOG_ENV, str(path))
    return path


def test_a_joined_raylets_banner_goes_to_its_file_not_the_terminal(
    tmp_path: Path,
    debug_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    script = stand_in(tmp_path, "exec sleep 60\n")
    monkeypatch.setattr(node_agent, "ray_executable", lambda: str(script))
    written = debug_log.with_name("ray-start-n1.log")
    written.parent.mkdir(parents=True)
    written.write_text("an earlier join's output\n")

    def alive(address: str) -> dict[str, float]:  # the raylet registers once it has spoken
        said = written.read_text() if written.exists() else ""
        return {node_resource("n1"): 1.0} if "ray stop" in said else {}

    monkeypatch.setattr(node_agent, "alive_node_resources", alive)
    proc, path = node_agent.join_cluster("10.0.0.1:6379", "n1", ["--num-cpus=4"], timeout_s=30)
    try:
        assert path == written
        text = written.read_text()
        assert text.startswith("an earlier join's output\n")  # appended, not replaced
        assert "To terminate the Ray runtime, run" in text
        assert "ray stop" not in "".join(capfd.readouterr())
        args = (tmp_path / "args").read_text().split()
        assert args[:3] == ["start", "--block", "--address=10.0.0.1:6379"]
        assert args[-1] == "--num-cpus=4"
    finally:
        node_agent.stop_process_group(proc)
    assert proc.poll() is not None


def test_a_ray_start_that_exits_is_refused_with_its_last_line(
    tmp_path: Path,
    debug_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    script = stand_in(tmp_path, 'echo "ConnectionError: the GCS at 10.0.0.1:6379 refused"\n'
                                "exit 3\n")  # fmt: skip
    monkeypatch.setattr(node_agent, "ray_executable", lambda: str(script))
    monkeypatch.setattr(node_agent, "alive_node_resources", lambda address: {})
    with pytest.raises(DependencyUnavailableError) as refused:
        node_agent.join_cluster("10.0.0.1:6379", "n2", timeout_s=30)
    written = debug_log.with_name("ray-start-n2.log")
    assert str(refused.value) == (
        "`ray start` exited with 3: ConnectionError: the GCS at 10.0.0.1:6379 refused "
        f"(all of its output: {written})"
    )
    assert "ray stop" in written.read_text()
    assert "ray stop" not in "".join(capfd.readouterr())


def test_without_a_writable_folder_the_output_stays_the_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(ray_logs.DEBUG_LOG_ENV, str(blocker / "debug.log"))
    script = stand_in(tmp_path, "exit 1\n")
    monkeypatch.setattr(node_agent, "ray_executable", lambda: str(script))
    monkeypatch.setattr(node_agent, "alive_node_resources", lambda address: {})
    with pytest.raises(DependencyUnavailableError, match=r"^`ray start` exited with 1$"):
        node_agent.join_cluster("10.0.0.1:6379", "n3", timeout_s=30)
    assert "Ray runtime started." in capfd.readouterr().out  # not lost
