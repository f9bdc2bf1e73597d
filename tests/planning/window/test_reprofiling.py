"""Re-profiling: averaging independent profiles of each stream's candidate configurations."""

from __future__ import annotations

import random

import pytest
from _recording_thief import RecordingThief

from deepedge.core.errors import InvalidInputError
from deepedge.planning.window.reprofiling import (
    ReprofileSpec,
    candidates,
    reprofiled_estimates,
)
from deepedge.sim.examples import illustrative_trace
from deepedge.sim.simulator import simulate
from deepedge.sim.trace import EkyaTrace, TraceWindow


@pytest.mark.parametrize(
    ("top_k", "expected"),
    [(1, {"b"}), (2, {"a", "b"}), (3, {"a", "b", "c"}), (None, {"a", "b", "c", "d"})],
)
def test_candidates_are_the_best_first_estimates(top_k: int | None, expected: set[str]) -> None:
    # "a" and "c" tie at 0.6: the earlier name ranks first.
    assert candidates({"a": 0.6, "b": 0.7, "c": 0.6, "d": 0.2}, top_k) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (ReprofileSpec(2, top_k=1), {"a": 0.6, "b": 0.6, "c": 0.5}),
        (ReprofileSpec(3, top_k=1), {"a": 0.6, "b": 0.7, "c": 0.5}),
        (ReprofileSpec(2), {"a": 0.65, "b": 0.6, "c": 0.5}),
    ],
)
def test_candidates_average_their_first_n_profiles(
    spec: ReprofileSpec, expected: dict[str, float]
) -> None:
    profiles = {"a": [0.6, 0.7], "b": [0.8, 0.4, 0.9], "c": [0.5]}
    got = reprofiled_estimates(profiles, spec)
    assert got == pytest.approx(expected)


def test_bad_specs_and_profiles_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        ReprofileSpec(1)
    with pytest.raises(InvalidInputError):
        ReprofileSpec(2, top_k=0)
    with pytest.raises(InvalidInputError):
        reprofiled_estimates({"a": []}, ReprofileSpec(2))


def test_averaging_lowers_the_winners_curse() -> None:
    # Ten equal configurations, estimates = truth + independent noise: the best first
    # estimate overrates its pick; the mean of three profiles overrates it less.
    rng = random.Random(15)
    curse_first = curse_avg = 0.0
    for _ in range(200):
        profiles = {f"c{i}": [0.7 + rng.gauss(0.0, 0.05) for _ in range(3)] for i in range(10)}
        first = max(p[0] for p in profiles.values())
        est = reprofiled_estimates(profiles, ReprofileSpec(3, top_k=3))
        curse_first += first - 0.7
        curse_avg += max(est.values()) - 0.7
    assert curse_avg < 0.75 * curse_first


def _with_profiles(trace: EkyaTrace, further: list[float]) -> EkyaTrace:
    """First estimate = truth - 0.1; further profiles = truth + each offset of ``further``."""
    windows = []
    for window in trace.windows:
        rows = [
            row.model_copy(
                update={
                    "retraining": [
                        c.model_copy(
                            update={
                                "estimated_accuracy_after": c.accuracy_after - 0.1,
                                "reprofiled_accuracy_after": [
                                    c.accuracy_after + d for d in further
                                ],
                            }
                        )
                        for c in row.retraining
                    ]
                }
            )
            for row in window.streams
        ]
        windows.append(TraceWindow(streams=rows))
    return trace.model_copy(update={"windows": windows})


def test_simulator_offers_the_averaged_estimates() -> None:
    base = illustrative_trace()
    trace = _with_profiles(base, [0.1, 0.0])
    rec = RecordingThief()
    simulate(trace, rec, deviation_tolerance=None, reprofile=ReprofileSpec(2))
    truth = {
        (r.stream_id, c.name): c.accuracy_after
        for r in base.windows[0].streams
        for c in r.retraining
    }
    offered = {
        (s.stream_id, c.name): c.accuracy_after
        for s in rec.problems[0].streams
        for c in s.retraining_configs
    }
    # (truth - 0.1 + truth + 0.1) / 2 = truth for every configuration of window 0.
    assert offered.keys() == truth.keys()
    assert offered == pytest.approx(truth, abs=1e-6)
    # Three profiles: (truth - 0.1 + truth + 0.1 + truth) / 3 = truth as well; without the
    # option the scheduler sees the first profile only.
    plain = RecordingThief()
    simulate(trace, plain, deviation_tolerance=None)
    first = {
        (s.stream_id, c.name): c.accuracy_after
        for s in plain.problems[0].streams
        for c in s.retraining_configs
    }
    assert first == pytest.approx({k: v - 0.1 for k, v in truth.items()}, abs=1e-6)
