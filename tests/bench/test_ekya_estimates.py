"""``python -m deepedge.bench.ekya_estimates``: the estimate transforms and the quick run."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support import result_values
from deepedge.bench import ekya_estimates
from deepedge.bench.ekya_sweep import sweep_traces
from deepedge.sim.trace import EkyaTrace, TraceRetraining, TraceStreamWindow


def _rows(trace: EkyaTrace) -> list[tuple[int, TraceStreamWindow, TraceRetraining]]:
    return [
        (w, r, c) for w, win in enumerate(trace.windows) for r in win.streams for c in r.retraining
    ]


def test_noise_free_estimates_are_the_truth() -> None:
    test, _ = sweep_traces(quick=True)
    exact = ekya_estimates.noisy_truth(test, 0.0, seed=0)
    for _, _, c in _rows(exact):
        assert c.est_accuracy == pytest.approx(c.accuracy_after)
    noisy = ekya_estimates.noisy_truth(test, 0.05, seed=0)
    errors = [c.est_accuracy - c.accuracy_after for _, _, c in _rows(noisy)]
    assert any(abs(e) > 1e-3 for e in errors)
    assert all(0.0 <= c.est_accuracy <= 1.0 for _, _, c in _rows(noisy))
    # the estimated seconds are left as profiled
    before = [c.estimated_gpu_seconds for _, _, c in _rows(test)]
    assert [c.estimated_gpu_seconds for _, _, c in _rows(noisy)] == before


def test_common_and_specific_errors_split_the_estimate_error() -> None:
    test, _ = sweep_traces(quick=True)
    common = ekya_estimates.common_errors(test)
    only_common = ekya_estimates.common_only(test)
    only_specific = ekya_estimates.specific_only(test)
    for (w, r, c), (_, _, cc), (_, _, cs) in zip(
        _rows(test), _rows(only_common), _rows(only_specific), strict=True
    ):
        e = common[(w, r.stream_id)]
        if 0.0 < c.accuracy_after + e < 1.0:
            assert cc.est_accuracy == pytest.approx(c.accuracy_after + e)
        if 0.0 < c.est_accuracy - e < 1.0:
            assert cs.est_accuracy == pytest.approx(c.est_accuracy - e)


def test_profiling_budget_is_per_stream() -> None:
    test, _ = sweep_traces(quick=True)
    one, two = (ekya_estimates.profiling_per_budget(test, g) for g in (1, 2))
    assert one > 0 and one == pytest.approx(2 * two)


@pytest.mark.slow
def test_quick_run_ends_with_result(capsys: pytest.CaptureFixture[str]) -> None:
    ekya_estimates.main(["--quick"])
    values = result_values(capsys.readouterr().out)
    assert list(values)[:3] == ["outcome_sd", "estimate_sd", "estimate_bias_abs"]
    assert values["outcome_sd"] >= 0 and values["profiling_per_budget_1gpu"] > 0


def test_a_trace_file_replaces_the_committed_trace(tmp_path: Path) -> None:
    test, holdout = sweep_traces(quick=False)
    cut = test.model_copy(update={"windows": test.windows[:2]})
    merged = cut.model_copy(
        update={
            "streams": [*cut.streams, *holdout.streams],
            "windows": [
                w.model_copy(update={"streams": [*w.streams, *h.streams]})
                for w, h in zip(cut.windows, holdout.windows[:2], strict=True)
            ],
        }
    )
    path = tmp_path / "trace.json"
    path.write_text(merged.model_dump_json())
    from_file, held = sweep_traces(quick=False, path=path)
    assert len(from_file.windows) == 2 and [s.stream_id for s in from_file.streams] == [
        s.stream_id for s in test.streams
    ]
    assert [s.stream_id for s in held.streams] == [s.stream_id for s in holdout.streams]
