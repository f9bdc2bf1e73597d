"""The analytic device catalog: calibration to the paper's figures and Figure 9's trends."""

from __future__ import annotations

import pytest

from deepedge.cluster.devices import AppKind, DeviceType
from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.catalog import DEVICE_PROFILES, REFERENCE_BATCH, DeviceCatalog
from deepedge.perfmodel.protocol import PerformanceModel

CAT = DeviceCatalog()
IDLE = NodeState(cpu_util=0.0, mem_util=0.3, gpu_util=0.0)
IDLE_PS = NodeState(cpu_util=0.0, mem_util=0.3)
TX2, NANO, PI = (d.value for d in DeviceType)


def step_time_s(device: str, state: NodeState, batch: int = REFERENCE_BATCH) -> float:
    compute = CAT.est_compute_time_s(device, state, batch)
    update = CAT.est_update_time_s(device, state, [batch] * 4, IDLE_PS, 4)
    return batch * compute + update


def test_catalog_satisfies_the_protocol() -> None:
    assert isinstance(CAT, PerformanceModel)


@pytest.mark.parametrize(("device", "published_s"), [(TX2, 1.89), (NANO, 2.69)])
def test_reference_step_time_matches_figure_3(device: str, published_s: float) -> None:
    assert step_time_s(device, IDLE) == pytest.approx(published_s, rel=1e-9)


def test_tx2_is_about_30_percent_faster_than_nano() -> None:
    ratio = step_time_s(NANO, IDLE) / step_time_s(TX2, IDLE)
    assert 1.3 <= ratio <= 1.5


@pytest.mark.parametrize("device", [TX2, NANO])
def test_gpu_utilisation_of_66_to_88_percent_adds_about_20_percent(device: str) -> None:
    idle = CAT.est_compute_time_s(device, IDLE, 16)
    rises = [
        CAT.est_compute_time_s(device, NodeState(0.0, 0.3, g), 16) / idle - 1 for g in (0.66, 0.88)
    ]
    assert sum(rises) / 2 == pytest.approx(0.2, abs=0.03)
    assert CAT.est_compute_time_s(device, NodeState(0.0, 0.3, 0.77), 16) / idle == pytest.approx(
        1.2
    )


@pytest.mark.parametrize("device", [TX2, NANO, PI])
def test_compute_time_grows_with_cpu_and_falls_with_batch(device: str) -> None:
    gpu = None if device == PI else 0.2
    low = CAT.est_compute_time_s(device, NodeState(0.1, 0.3, gpu), 16)
    high = CAT.est_compute_time_s(device, NodeState(0.8, 0.3, gpu), 16)
    assert high > low
    assert CAT.est_compute_time_s(device, NodeState(0.1, 0.3, gpu), 64) < low


def test_compute_time_grows_with_gpu_utilisation() -> None:
    times = [CAT.est_compute_time_s(NANO, NodeState(0.2, 0.3, g), 16) for g in (0.0, 0.5, 0.9)]
    assert times == sorted(times) and times[0] < times[-1]


@pytest.mark.parametrize(
    ("label", "kwargs_a", "kwargs_b"),
    [
        ("batch", {"batch_sizes": [8, 8, 8, 8]}, {"batch_sizes": [32, 32, 32, 32]}),
        ("workers", {"n_workers": 6, "batch_sizes": [16] * 6}, {"n_workers": 2}),
        ("ps cpu", {"ps_state": NodeState(0.8, 0.3)}, {"ps_state": NodeState(0.1, 0.3)}),
    ],
)
def test_update_time_trends(label: str, kwargs_a: dict, kwargs_b: dict) -> None:
    """Update time falls with batch size, grows with |W| and with the PS CPU load."""
    base = {"batch_sizes": [16, 16], "ps_state": IDLE_PS, "n_workers": 2}
    slower = CAT.est_update_time_s(TX2, IDLE, **{**base, **kwargs_a})
    faster = CAT.est_update_time_s(TX2, IDLE, **{**base, **kwargs_b})
    assert slower > faster, label


def test_vector_update_times_equal_scalar_calls() -> None:
    devices = [TX2, NANO, NANO]
    states = [IDLE, NodeState(0.5, 0.4, 0.3), NodeState(0.2, 0.5, 0.9)]
    batches = [64, 12, 30]
    ps = NodeState(0.3, 0.3)
    vector = CAT.est_update_times_s(devices, states, batches, ps, 3)
    scalar = [
        CAT.est_update_time_s(d, s, batches, ps, 3) for d, s in zip(devices, states, strict=True)
    ]
    assert vector == pytest.approx(scalar)


def test_memory_grows_with_batch_and_max_batch_respects_capacity() -> None:
    state = NodeState(0.2, 0.4, 0.1)
    mems = [CAT.est_state(NANO, state, b).mem_util for b in (4, 16, 32)]
    assert mems == sorted(mems) and mems[0] < mems[-1]
    total = DEVICE_PROFILES[DeviceType.JETSON_NANO].mem_total_mb
    capacity = 3600.0
    b = CAT.max_batch_size(NANO, state, capacity, 4, 64)
    assert 4 <= b < 64
    assert CAT.est_state(NANO, state, b).mem_util * total <= capacity + 1e-6
    assert CAT.est_state(NANO, state, b + 1).mem_util * total > capacity


@pytest.mark.parametrize(
    ("mem_util", "capacity", "bounds", "expected"),
    [
        (0.3, 8000.0, (4, 64), 64),  # plenty of memory: the upper bound
        (0.85, 3600.0, (4, 64), 0),  # not even b_min fits
        (0.3, 3600.0, (8, 8), 8),  # fixed batch that fits
    ],
)
def test_max_batch_size_edges(
    mem_util: float, capacity: float, bounds: tuple[int, int], expected: int
) -> None:
    state = NodeState(0.1, mem_util, 0.1)
    assert CAT.max_batch_size(NANO, state, capacity, *bounds) == expected


def test_training_raises_every_utilisation_and_pressure() -> None:
    before = NodeState(0.3, 0.4, 0.2)
    after = CAT.est_state(TX2, before, 32)
    assert after.cpu_util > before.cpu_util
    assert after.gpu_util is not None and before.gpu_util is not None
    assert after.gpu_util > before.gpu_util
    assert after.mem_util > before.mem_util
    assert CAT.est_exec_time_s(TX2, "sift", after) > CAT.est_exec_time_s(TX2, "sift", before)


def test_sift_meets_its_200ms_period_on_idle_boards() -> None:
    for device in DeviceType:
        gpu = 0.0 if device.has_gpu else None
        assert CAT.est_exec_time_s(device.value, AppKind.SIFT.value, NodeState(0, 0.3, gpu)) < 0.2


def test_pi4_has_no_gpu_state() -> None:
    assert CAT.est_state(PI, NodeState(0.2, 0.3), 8).gpu_util is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: CAT.est_compute_time_s("jetson-xavier", IDLE, 8),
        lambda: CAT.est_exec_time_s(TX2, "ffmpeg", IDLE),
        lambda: CAT.est_compute_time_s(TX2, IDLE, 0),
        lambda: CAT.max_batch_size(TX2, IDLE, 4000.0, 8, 4),
        lambda: CAT.est_update_time_s(TX2, IDLE, [], IDLE_PS, 0),
        lambda: DeviceCatalog(ps_device="abacus"),
    ],
)
def test_bad_arguments_raise_invalid_input(call) -> None:
    with pytest.raises(InvalidInputError):
        call()


def test_a_workloads_catalog_scales_compute_by_flops_and_update_by_parameters() -> None:
    from deepedge.perfmodel.catalog import REFERENCE_MODEL, ModelCost

    assert DeviceCatalog(model=REFERENCE_MODEL).est_compute_time_s(TX2, IDLE, 16) == (
        CAT.est_compute_time_s(TX2, IDLE, 16)
    )
    small = ModelCost(train_gflops_per_sample=0.57, trainable_params=4 * 2_049_000)
    cat = DeviceCatalog(model=small)
    for b in (4, 16, 64):
        assert cat.est_compute_time_s(NANO, IDLE, b) == pytest.approx(
            0.1 * CAT.est_compute_time_s(NANO, IDLE, b)
        )
    update = cat.est_update_time_s(TX2, IDLE, [16, 32], IDLE_PS, 2)
    assert update == pytest.approx(4 * CAT.est_update_time_s(TX2, IDLE, [16, 32], IDLE_PS, 2))
    assert cat.est_update_times_s([TX2, NANO], [IDLE, IDLE], [16, 32], IDLE_PS, 2) == (
        pytest.approx(
            [4 * t for t in CAT.est_update_times_s([TX2, NANO], [IDLE, IDLE], [16, 32], IDLE_PS, 2)]
        )
    )
    assert cat.est_state(TX2, IDLE, 16) == CAT.est_state(TX2, IDLE, 16)  # memory/state alike


@pytest.mark.parametrize(
    ("forward", "params", "trainable", "train"),
    [(1.0, 100, 100, 3.0), (1.0, 100, 0, 1.0), (2.0, 100, 50, 4.0)],
)
def test_model_cost_from_the_forward_pass(
    forward: float, params: int, trainable: int, train: float
) -> None:
    from deepedge.perfmodel.catalog import ModelCost

    if trainable == 0:
        with pytest.raises(InvalidInputError):
            ModelCost.of(forward, params, trainable)
        return
    assert ModelCost.of(forward, params, trainable).train_gflops_per_sample == pytest.approx(train)
