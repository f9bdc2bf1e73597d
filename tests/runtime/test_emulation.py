"""Emulated devices: step times from the catalog, pacing, and the label in logs."""

from __future__ import annotations

import time

import pytest

from deepedge.cluster.state import NodeState
from deepedge.perfmodel.catalog import DeviceCatalog
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.emulation import EmulatedDevice, Pacer, emulated_devices
from deepedge.runtime.training.testbed import paper_testbed


def test_modelled_step_is_the_catalogs_step_time() -> None:
    spec = paper_testbed(100)
    plan = ShardPlan(
        policy=Policy.FAIR,
        feasible=True,
        dataset_size=100,
        workers=[
            WorkerAssignment(id="tx2-1", selected=True, shard=60, batch_size=32),
            WorkerAssignment(id="nano-3", selected=True, shard=40, batch_size=16),
            WorkerAssignment(id="nano-1", selected=False, shard=0, batch_size=0),
            WorkerAssignment(id="nano-2", selected=False, shard=0, batch_size=0),
        ],
    )
    devices = emulated_devices(spec, plan, time_scale=0.01)
    assert set(devices) == {"tx2-1", "nano-3"}
    cat = DeviceCatalog()
    nano3 = spec.workers[3].state.to_node_state()
    expected = 16 * cat.est_compute_time_s("jetson-nano", nano3, 16) + cat.est_update_time_s(
        "jetson-nano", nano3, [32, 16], spec.parameter_server.state.to_node_state(), 2
    )
    assert devices["nano-3"].modelled_step_s == pytest.approx(expected)
    assert devices["nano-3"].paced_step_s == pytest.approx(0.01 * expected)
    assert devices["nano-3"].modelled_step_s > devices["tx2-1"].modelled_step_s / 2
    assert "emulated jetson-nano" in devices["nano-3"].label


@pytest.mark.parametrize(("paced_s", "work_s", "overruns"), [(0.05, 0.0, 0), (0.01, 0.03, 1)])
def test_pacer_sleeps_out_the_step_or_counts_an_overrun(
    paced_s: float, work_s: float, overruns: int
) -> None:
    device = EmulatedDevice("w", "jetson-tx2", NodeState(0.1, 0.1, 0.1), 8, paced_s, 1.0)
    pacer = Pacer(device)
    start = time.perf_counter()
    time.sleep(work_s)
    pacer.pace(start)
    assert time.perf_counter() - start >= paced_s
    assert pacer.overruns == overruns
