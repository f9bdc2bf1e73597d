"""Ray's own messages go to the debug log, never to a command's stderr or a job's log."""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from deepedge.runtime.cluster import ray_logs


def test_ray_records_go_to_the_debug_log_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray  # noqa: F401  (its import installs the stderr handler that is replaced)

    path = tmp_path / "state" / "debug.log"
    monkeypatch.setenv(ray_logs.DEBUG_LOG_ENV, str(path))
    assert ray_logs.divert() == path
    assert ray_logs.divert() == path  # idempotent: one handler
    for name in ("ray", "ray._private"):
        handlers = logging.getLogger(name).handlers
        assert len(handlers) == 1 and handlers[0].__class__.__name__ == "_DebugLog"
    logging.getLogger("ray").handlers.clear()  # what ray.init(configure_logging=False) does
    logging.getLogger("ray._private.worker").warning("File descriptor limit 1024 is too low")
    logging.getLogger("ray._private").handlers[0].flush()
    assert path.read_text().count("File descriptor limit 1024") == 1
    assert "File descriptor" not in capsys.readouterr().err


def test_an_unwritable_debug_log_drops_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(ray_logs.DEBUG_LOG_ENV, str(blocker / "debug.log"))
    assert ray_logs.divert() is None
    logging.getLogger("ray").warning("noise")
    logging.getLogger("ray._private.worker").warning("noise")
    assert "noise" not in capsys.readouterr().err


def test_a_learner_keeps_its_debug_log_beside_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ray_logs.DEBUG_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    ray_logs.keep_beside_job()
    assert os.environ[ray_logs.DEBUG_LOG_ENV] == str(tmp_path / "debug.log")


@pytest.mark.ray
@pytest.mark.slow
def test_starting_ray_under_a_low_descriptor_limit_prints_nothing(tmp_path: Path) -> None:
    """Ray warned on stderr about the limit a learner runs under, and about token
    authentication: the first lines of every job log and of `deepedge update`'s output."""
    code = (
        "from deepedge.runtime.cluster.session import ray_session\n"
        "import ray\n"
        "with ray_session(1):\n"
        "    print('answer', ray.get(ray.put(41)) + 1)\n"
    )
    env = {**os.environ, ray_logs.DEBUG_LOG_ENV: str(tmp_path / "debug.log")}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "answer 42\n"
    assert proc.stderr == ""
    assert "File descriptor limit 1024" in (tmp_path / "debug.log").read_text()
