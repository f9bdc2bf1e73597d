"""The Ekya edge server run live: micro-profiling at window start, then plan, retrain, hot-load."""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.learning.gate import passes_gate
from deepedge.learning.microprofiler import NamedConfig, ProfileSettings
from deepedge.learning.models import make_edge_model
from deepedge.learning.stream import load_digits_images
from deepedge.planning.window.documents import RetrainingHyperparameters, StreamWindow
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.runtime.edge.edge_server import (
    EdgeServer,
    StreamRuntime,
    WindowData,
    edge_cnn_factory,
    profile_stream,
    state_of,
)
from deepedge.runtime.edge.edge_windows import (
    EdgeRunSpec,
    default_candidates,
    frame_sampling_configs,
    run_edge_windows,
)


def _candidates() -> list[NamedConfig]:
    out = []
    for epochs in (1, 3):
        hp = RetrainingHyperparameters(
            epochs=epochs, batch_size=32, last_layer_neurons=10, frozen_layers=1, data_fraction=1.0
        )
        out.append(NamedConfig(f"e{epochs}", hp))
    return out


def test_profile_stream_estimates_every_candidate_from_the_deployed_model() -> None:
    digits = load_digits_images(16)
    model = make_edge_model(10, 16, seed=1)
    train = (digits.images[:200], digits.labels[:200])
    val = (digits.images[200:260], digits.labels[200:260])
    profile = profile_stream(
        state_of(model),
        edge_cnn_factory(),
        train,
        val,
        _candidates(),
        ProfileSettings(seed=2),
        share=1.0,
    )
    assert [c.name for c in profile.configs] == ["e1", "e3"]
    for c in profile.configs:
        assert 0.0 <= c.accuracy_after <= 1.0
        assert c.gpu_seconds > 0.0
        assert c.hyperparameters is not None
    assert profile.current_accuracy < 0.5  # an untrained model on fresh digits
    assert profile.seconds > 0.0


def test_begin_window_rejects_missing_data_and_no_candidates() -> None:
    server = EdgeServer(ThiefScheduler(), gpus=1.0, window_s=10.0)
    table, fractions = frame_sampling_configs(0.3)
    empty = (np.zeros((0, 1, 16, 16), np.float32), np.zeros(0, np.int64))
    server.streams["a"] = StreamRuntime(
        stream=StreamWindow(stream_id="a", current_accuracy=0.5, inference_configs=table),
        state={},
        train=empty,
        val=empty,
        sample_fractions=fractions,
    )
    with pytest.raises(InvalidInputError, match="no window data for stream"):
        server.begin_window({}, _candidates())
    with pytest.raises(InvalidInputError, match="no retraining configurations"):
        server.begin_window({"a": WindowData(empty, empty)}, [])


def test_frame_sampling_table_matches_the_documented_model() -> None:
    table, fractions = frame_sampling_configs(0.4)
    assert [c.gpu_demand for c in table] == pytest.approx([0.4, 0.2, 0.1, 0.05])
    assert [c.accuracy_factor for c in table] == pytest.approx(
        [r**0.3 for r in (1.0, 0.5, 0.25, 0.125)]
    )
    assert set(fractions) == {c.name for c in table}
    assert len({c.name for c in default_candidates()}) == 6


@pytest.mark.parametrize(
    "bad", [{"streams": 0}, {"windows": 0}, {"gpus": 0.0}, {"window_s": -1.0}, {"samples": 5}]
)
def test_run_spec_rejects_bad_input(bad: dict[str, float]) -> None:
    with pytest.raises(InvalidInputError):
        EdgeRunSpec(**bad)  # type: ignore[arg-type]


@pytest.mark.ray
@pytest.mark.slow
def test_live_windows_profile_plan_retrain_and_hot_load() -> None:
    from deepedge.runtime.cluster.session import ray_session

    spec = EdgeRunSpec(streams=2, windows=2, gpus=1.0, window_s=20.0, samples=300, eval_size=200)
    with ray_session(num_cpus=2):
        reports = run_edge_windows(spec, ThiefScheduler(), _candidates())
    assert [r.index for r in reports] == [1, 2]
    retrained = []
    for report in reports:
        assert report.plans >= 1
        assert 0.0 <= report.planned_accuracy <= 1.0
        assert [s.stream_id for s in report.streams] == ["cam00", "cam01"]
        for s in report.streams:
            assert s.configs_profiled >= 1 and s.profiling_s > 0.0
            if s.retrained is None:
                # Nothing was loaded: the deployed model is unchanged.
                assert s.accuracy_after == s.accuracy_before
                assert s.validation_accuracy is None
            else:
                assert s.retrained in {"e1", "e3"}
                assert s.estimated_accuracy is not None and s.validation_accuracy is not None
                retrained.append(s)
    # cam00 drifts at full severity from window 1: its stale model is near chance, the
    # profiler sees retraining recover it, and the thief retrains it.
    first = reports[0].streams[0]
    assert first.severity == 1.0 and first.retrained is not None
    for s in retrained:
        # The hot-load gate decides on the validation split: a retrained model that scored at
        # least the deployed one's serves from then on; one that scored lower (a retraining
        # cut short on a loaded host can) leaves the deployed model serving, unchanged.
        val, deployed = s.validation_accuracy, s.deployed_validation_accuracy
        assert val is not None and deployed is not None
        assert s.hot_loaded == passes_gate(val, deployed, 0.0)
        if not s.hot_loaded:
            assert s.accuracy_after == s.accuracy_before
    if first.hot_loaded:
        assert first.accuracy_after > first.accuracy_before
