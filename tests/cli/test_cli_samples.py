"""``deepedge deployments samples export|delete`` against a real server process, and the
times the commands read."""

from __future__ import annotations

import io
import json
import math
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.cli.samples import moment
from deepedge.core.errors import InvalidInputError

runner = CliRunner()
N = 6


@pytest.mark.parametrize(
    ("given", "expected"),
    [("1714564800", 1714564800.0), (" 12.5 ", 12.5),
     ("2024-05-01T12:00:00Z", 1714564800.0), ("2024-05-01T14:00:00+02:00", 1714564800.0),
     ("2024-05-01T12:00:00", datetime(2024, 5, 1, 12).timestamp())],
)  # fmt: skip
def test_a_time_is_epoch_seconds_or_iso_8601(given: str, expected: float) -> None:
    assert moment(given, "--since") == expected


@pytest.mark.parametrize("given", ["yesterday", "nan", "inf", "", "2024-13-01"])
def test_a_time_that_is_neither_is_refused_naming_the_option(given: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        moment(given, "--until")
    assert refused.value.field == "until"


@pytest.mark.parametrize(
    "args",
    [["--since", "soon"], [], ["--all", "--id", "r1"], ["--since", "5", "--until", "1"],
     ["--until", str(math.inf)]],
)  # fmt: skip
def test_a_deletion_that_names_nothing_or_too_much_is_refused_before_any_request(
    args: list[str],
) -> None:
    env = {"DEEPEDGE_URL": "http://127.0.0.1:9", "DEEPEDGE_TOKEN": "t"}  # (nothing listens)
    done = runner.invoke(app, ["deployments", "samples", "delete", "cam", *args, "--yes"],
                         env=env)  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "cannot reach" not in done.output


@pytest.mark.slow
def test_samples_are_exported_and_deleted_through_the_cli(tmp_path: Path) -> None:
    from deepedge.api.local_server import ServerProcess, make_tenant
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.rollout_status import DeploymentStatus
    from deepedge.dataplane.routing import RouteKind
    from deepedge.dataplane.sample_store import (
        GOLDEN,
        Retention,
        Sample,
        SampleStore,
        sample_store_path,
    )
    from deepedge.service.config import ServiceSettings
    from deepedge.service.store import JobStore

    settings = ServiceSettings(data_dir=tmp_path / "data")
    make_tenant(settings, "alice", "tok-alice")
    store = JobStore(settings.url)
    registry = DeploymentStore(store)
    record, _ = registry.create(store.tenant_by_token("tok-alice").id, DeploymentSpec(name="cam"))
    registry.commit(record, Step(deployment={"status": DeploymentStatus.STOPPED}))
    store.dispose()
    inputs = np.random.default_rng(0).normal(size=(N, 1, 4, 4)).astype(np.float32)
    samples = SampleStore(sample_store_path(settings.data_dir))
    samples.append(record.id, [Sample(f"r{i}", 1000.0 + i, 1, RouteKind.SERVING, i % 2,
                                      inputs[i]) for i in range(N)],
                   Retention(), now=1000.0 + N)  # fmt: skip
    samples.label(record.id, "r2", 1, GOLDEN, now=2000.0)
    server = ServerProcess(settings)
    server.start()
    env = {"DEEPEDGE_URL": server.url, "DEEPEDGE_TOKEN": "tok-alice"}

    def run(*args: str, answer: str | None = None) -> Any:
        return runner.invoke(app, ["deployments", "samples", *args], env=env, input=answer)

    try:
        out = tmp_path / "cam.npz"
        done = run("export", "cam", "--out", str(out), "-o", "json")
        assert done.exit_code == 0, done.output
        summary = json.loads(done.stdout)
        assert summary["samples"] == N and summary["bytes"] == out.stat().st_size
        assert stat.S_IMODE(out.stat().st_mode) == 0o600  # people's camera images
        with np.load(out, allow_pickle=False) as archive:
            np.testing.assert_array_equal(archive["inputs"], inputs)
            assert list(archive["label"]) == [-1, -1, 1, -1, -1, -1]
            assert list(archive["request_id"]) == [f"r{i}" for i in range(N)]
        piped = run("export", "cam", "--out", "-")
        assert piped.exit_code == 0 and f"cam: {N} samples" in piped.stderr
        with np.load(io.BytesIO(piped.stdout_bytes)) as archive:
            np.testing.assert_array_equal(archive["inputs"], inputs)
        ranged = tmp_path / "range.npz"
        since = datetime.fromtimestamp(1002, UTC).isoformat()
        done = run("export", "cam", "--out", str(ranged), "--since", since, "--until", "1004")
        assert done.exit_code == 0 and "wrote 2 samples" in done.stdout
        with np.load(ranged) as archive:
            np.testing.assert_array_equal(archive["inputs"], inputs[2:4])

        kept = run("delete", "cam", "--id", "r0", answer="n\n")
        assert kept.exit_code == 5 and "not deleted" in kept.stderr
        done = run("delete", "cam", "--id", "r0", "--id", "r9", answer="y\n")
        assert done.exit_code == 0, done.output
        assert "deleted 1 samples" in done.stdout and "r9" in done.stdout
        done = run("delete", "cam", "--until", "1003", "--yes", "-o", "json")
        assert json.loads(done.stdout)["deleted"] == 2
        assert SampleStore(samples.path).usage(record.id).samples == N - 3
        missing = run("delete", "nope", "--all", "--yes")
        assert missing.exit_code == 4
        done = run("delete", "cam", "--all", "--yes")
        assert "deleted 3 samples" in done.stdout
        done = run("export", "cam", "--out", str(out))
        assert "wrote 0 samples" in done.stdout
    finally:
        server.stop()
