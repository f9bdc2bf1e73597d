"""The control-plane benchmark's lag and missed-drop arithmetic on recorded API answers
(the benchmark itself needs Ray jobs and minutes: it is run by hand, see BENCHMARKS.md)."""

from __future__ import annotations

from typing import Any

from deepedge.bench.controlplane import edge_windows, trigger_lags


class Recorded:
    """Answers GETs from a dict (a unit-test stand-in for the HTTP client)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def get(self, path: str) -> Any:
        return self.answers[path.split("?")[0]]


def window(index: int, accuracy: float, trigger: str = "none") -> dict[str, Any]:
    return {"window": index, "accuracy": accuracy, "trigger": trigger}


def test_lag_is_submission_minus_due_time_and_a_silent_first_drop_is_missed() -> None:
    events_a = [
        {"kind": "trigger", "version": 2, "at": 10.1,
         "detail": {"trigger": "accuracy-drop", "window_due_at": 10.0}},
        {"kind": "job-submitted", "version": 2, "at": 10.4, "detail": {}},
        {"kind": "trigger", "version": 3, "at": 20.0,
         "detail": {"trigger": "request", "window_due_at": 19.0}},  # not an accuracy drop
        {"kind": "job-submitted", "version": 3, "at": 25.0, "detail": {}},
    ]  # fmt: skip
    answers = {
        "/v1/deployments/a/events": {"events": events_a},
        "/v1/deployments/a/windows": {"windows": [window(0, 0.9), window(1, 0.5, "accuracy-drop")]},
        "/v1/deployments/b/events": {"events": []},
        "/v1/deployments/b/windows": {"windows": [window(0, 0.9), window(1, 0.4)]},
    }
    lags, missed = trigger_lags(Recorded(answers), ["a", "b"])  # type: ignore[arg-type]
    assert [round(x, 6) for x in lags] == [0.4]
    assert missed == 1  # b's first window under the threshold did not trigger


def _allocation(job: str, name: str, streams: list[tuple[str, float, float]]) -> dict[str, Any]:
    return {"kind": "allocation", "job_id": job, "detail": {"policy": "ekya-window", "gpus": 2.0,
            "streams": [{"stream_id": s, "inference_gpus": i, "retraining_gpus": r}
                        for s, i, r in streams]}}  # fmt: skip


def test_an_edge_windows_share_sums_each_deployments_own_stream() -> None:
    """Window j1 scheduled a and b (1.2 + 0.6 of 2 GPUs: 0.9); window j2 only b; each
    deployment counts only its own stream of the window's split."""
    j1 = [("a", 0.2, 1.0), ("b", 0.6, 0.0)]
    answers = {
        "/v1/deployments/a/events": {"events": [_allocation("j1", "a", j1)]},
        "/v1/deployments/b/events": {"events": [
            _allocation("j1", "b", j1), {"kind": "trigger", "job_id": None, "detail": {}},
            _allocation("j2", "b", [("b", 0.4, 1.2)])]},
    }  # fmt: skip
    windows, most, share = edge_windows(Recorded(answers), ["a", "b"])  # type: ignore[arg-type]
    assert (windows, most) == (2, 2)
    assert abs(share - 0.9) < 1e-9


def test_the_planted_model_waits_out_an_update_then_registers(monkeypatch: Any) -> None:
    import pytest

    from deepedge.bench import controlplane

    class Busy:
        """Answers 409 (an update runs) twice, then registers version 3."""

        def __init__(self) -> None:
            self.posts = 0

        def post(self, path: str, body: Any) -> Any:
            self.posts += 1
            if self.posts <= 2:
                raise RuntimeError(f'POST {path}: 409 {{"error":"conflict"}}')
            return {"version": 3}

    monkeypatch.setattr(controlplane, "_weights_size", lambda client, name: 4)
    monkeypatch.setattr(controlplane.time, "sleep", lambda s: None)
    busy = Busy()
    assert controlplane.plant_bad_model(busy, "planted") == 3  # type: ignore[arg-type]
    assert busy.posts == 3

    class Broken(Busy):
        def post(self, path: str, body: Any) -> Any:
            raise RuntimeError(f"POST {path}: 422 bad weights")

    with pytest.raises(RuntimeError, match="422"):
        controlplane.plant_bad_model(Broken(), "planted")  # type: ignore[arg-type]
