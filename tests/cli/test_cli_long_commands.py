"""The long commands show their progress on stderr and leave stdout as it was.

Off a terminal the progress helper writes one plain line per step (``NAME: [done/total
unit] note (elapsed)``); these run each command on its quickest input: a trace of two
windows, a camera whose endpoint refuses every request, the demo's loop replaced by one
that tells two windows, and the site demo's follower over a scripted service.
"""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _progress_lines(stderr: str, name: str) -> list[str]:
    """The progress lines of ``name``, without their elapsed time."""
    prefix = f"{name}: "
    return [line.rsplit(" (", 1)[0] for line in stderr.splitlines() if line.startswith(prefix)]


def test_simulate_counts_the_replayed_windows_on_stderr() -> None:
    trace = EXAMPLES / "ekya-illustrative-trace.json"
    result = runner.invoke(app, ["simulate", "ekya", str(trace)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # stdout is the result alone
    accuracy = [w["mean_accuracy"] for w in out["windows"]]
    assert _progress_lines(result.stderr, "simulate") == [
        f"simulate: [{i + 1}/2 windows] window {i}: mean accuracy {a:.3f}"
        for i, a in enumerate(accuracy)
    ]


def test_plan_place_says_what_it_solves_and_how_it_ended() -> None:
    problem = EXAMPLES / "placement-tiny.json"
    result = runner.invoke(app, ["plan", "place", str(problem), "--method", "milp"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "optimal"
    assert _progress_lines(result.stderr, "place") == [
        "place: solving by milp (time limit 60 s)",
        "place: optimal by milp",
    ]


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("output", ["table", "json"])
def test_camera_counts_windows_and_requests_on_stderr(output: str) -> None:
    """2 requests per window (10/s for 0.2 s), every one refused: the count still moves."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    args = ["camera", "demo.camera-1", "--key", "k", "--endpoint", endpoint, "--windows", "2",
            "--window-s", "0.2", "--rate", "10", "-o", output]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert _progress_lines(result.stderr, "camera") == [
        "camera: [1/2 windows] window 0: 0/2 answered; 2 requests sent",
        "camera: [2/2 windows] window 1: 0/2 answered; 4 requests sent",
    ]
    if output == "json":
        windows = json.loads(result.stdout)["windows"]
        assert [(w["sent"], w["failed"]) for w in windows] == [(2, 2), (2, 2)]
    else:
        lines = result.stdout.splitlines()
        assert [line.split(":")[0] for line in lines] == ["window   0", "window   1"]
        assert all("0/2 answered (2 failed)" in line for line in lines)


def test_demo_tells_its_story_on_stdout_and_counts_windows_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib

    from deepedge.learning.trigger import TriggerKind
    from deepedge.runtime.cluster import session
    from deepedge.runtime.training import loop

    def fake_loop(config: Any, workdir: Path, *args: Any) -> loop.LoopResult:
        say, on_window = args[1], args[4]
        records = (
            loop.WindowRecord(0, 0.0, 1, 0.95, 0.94, TriggerKind.NONE),
            loop.WindowRecord(1, 0.8, 1, 0.60, 0.62, TriggerKind.ACCURACY_DROP, 0, 2, 0.9),
        )
        for record in records:
            say(f"window {record.window}: the story")
            on_window(record)
        return loop.LoopResult(config, records, (), 0.97, workdir / "models")

    monkeypatch.setattr(loop, "run_loop", fake_loop)
    monkeypatch.setattr(session, "ray_session", lambda *_: contextlib.nullcontext())
    result = runner.invoke(app, ["demo", "--out", str(tmp_path), "--windows", "2"])
    assert result.exit_code == 0, result.output
    story = result.stdout.splitlines()
    assert [line.split("] ", 1)[1] for line in story[:2]] == [
        "window 0: the story",
        "window 1: the story",
    ]
    assert story[2].startswith(f"report: {tmp_path / 'report.md'}")
    assert _progress_lines(result.stderr, "demo") == [
        "demo: [0/2 windows] training the models, starting Ray",
        "demo: [1/2 windows] window 0: v1 0.950",
        "demo: [2/2 windows] window 1: v1 0.600, update v2 0.900",
    ]
    assert "demo:" not in result.stdout


class _Answer:
    def __init__(self, body: dict[str, Any], status_code: int = 200) -> None:
        self.body, self.status_code = body, status_code

    def json(self) -> dict[str, Any]:
        return self.body


def _window(index: int, accuracy: float | None, version: int = 1) -> dict[str, Any]:
    return {"window": index, "accuracy": accuracy, "served_version": version, "samples": 300,
            "severity": 0.5, "canary_version": None, "canary_accuracy": None}  # fmt: skip


class _Report:
    """A camera window as the camera reports it."""

    def __init__(self, window: int, accuracy: float) -> None:
        self.window, self.accuracy = window, accuracy

    def document(self) -> dict[str, Any]:
        return {"window": self.window, "accuracy": self.accuracy, "answered": 300,
                "sent": 300, "versions": {}, "canary_share": 0.0}  # fmt: skip


class _ScriptedSite:
    """A service (and its camera) that shows one more poll per poll: the first scene, the
    drift at camera window 6 and its recovery, the first scene again served by a restored
    version, the planted v5 rolled back, and two windows after it."""

    CAMERA: ClassVar[dict[int, list[float]]] = {
        0: [0.95, 0.96, 0.95], 1: [0.95, 0.94, 0.96], 2: [0.3, 0.5], 3: [0.93, 0.95],
        4: [0.6], 5: [0.95],
    }  # fmt: skip
    EVENTS: ClassVar[dict[int, list[dict[str, Any]]]] = {
        4: [{"seq": 0, "kind": "promoted", "version": 1, "message": "v1 again",
             "detail": {"restored": True}}],
        7: [{"seq": 1, "kind": "rolled-back", "version": 5, "message": "v5 rolled back",
             "detail": {}}],
    }  # fmt: skip

    def __init__(self, camera: Any, story: Any) -> None:
        self.poll, self.camera, self.story = -1, camera, story

    def get(self, path: str) -> _Answer:
        if "/events" in path:
            self.poll += 1
            for accuracy in self.CAMERA.get(self.poll, []):
                window = len(self.camera.reports)
                self.story.scene_of(window)  # (the camera draws the window, then sends it)
                self.camera.reports.append(_Report(window, accuracy))
            return _Answer({"events": self.EVENTS.get(self.poll, [])})
        return _Answer({"windows": [_window(self.poll, 0.9, 2)]})

    def post(self, path: str, json: dict[str, Any]) -> _Answer:
        return _Answer({"version": 5}, 201)


def test_site_demo_tells_the_drift_its_recovery_the_recurring_scene_and_the_rollback() -> None:
    from deepedge.cli.demo_site import Story, _follow
    from deepedge.cli.progress import Progress

    class Camera:
        def __init__(self) -> None:
            self.reports: list[Any] = []

    stream = io.StringIO()
    bar = Progress("demo --site", total=150, unit="windows", stream=stream)
    said: list[str] = []
    camera, story = Camera(), Story(0)
    site = _ScriptedSite(camera, story)
    told = _follow(site, 150, said.append, camera, bar, story)  # type: ignore[arg-type]
    assert told
    lines = [line for line in said if line.startswith("story: ")]
    assert lines[0] == ("story: the scene drifts from camera window 6 on (served 0.950 before, "
                        "true labels)")  # fmt: skip
    assert lines[1].startswith(
        "story: recovered: camera windows 8-9 served within 3 points of 0.950"
    )
    assert lines[2] == ("story: the first scene served as before again from camera window 11, 1 "
                        "window(s) after it came back")  # fmt: skip
    seen = [story.scene_of(w) for w in range(12)]  # the scene each camera window was drawn in
    assert seen == [0.0] * 6 + [1.0] * 4 + [0.0] * 2
    assert "  decision: rolled-back: v5 rolled back" in said
    assert _progress_lines(stream.getvalue(), "demo --site")[-1].endswith(
        "the planted model was rolled back"
    )


def test_site_demo_says_when_the_drifts_version_serves_the_first_scene_as_before() -> None:
    """No kept version needed: the version that learned the drift serves the returning first
    scene within 3 points of before, and the story goes on at once (it waited for a restore
    that need not come, 15 windows in one run)."""
    from deepedge.cli.demo_site import Plot, Story

    said: list[str] = []
    story = Story(0)
    plot = Plot(story, said.append, "weights")
    for window, accuracy in enumerate([0.95, 0.94, 0.96, 0.96, 0.95, 0.95, 0.30, 0.94, 0.95, 0.94]):
        plot.camera_window(window, accuracy)
    assert said[-1] == ("story: the first scene served as before again from camera window 9, "
                        "0 window(s) after it came back by the version that learned the drift "
                        "(it did not forget the first scene; no kept version needed)")  # fmt: skip
    assert plot.stage == "planting an untrained model"
