"""Node agent: P95 node state, GPU absent (None) without a GPU, live sampling."""

from __future__ import annotations

import time

import numpy as np
import pytest

from deepedge.cluster.metrics import (
    CpuScope,
    GpuProbe,
    MetricsSample,
    MetricsSampler,
    NodeAgent,
    percentile_state,
)
from deepedge.core.errors import InvalidInputError


def _samples(cpus, mems, gpus):
    return [
        MetricsSample(float(k), c, m, g)
        for k, (c, m, g) in enumerate(zip(cpus, mems, gpus, strict=True))
    ]


@pytest.mark.parametrize(
    ("cpus", "gpus", "expected_cpu", "expected_gpu"),
    [
        (list(np.linspace(0, 1, 21)), [0.5] * 21, 0.95, 0.5),
        ([0.2] * 19 + [1.0], [0.1] * 20, np.percentile([0.2] * 19 + [1.0], 95), 0.1),
        ([0.3, 0.4], [None, None], 0.395, None),  # no GPU: absent, not 0
        ([0.3, 0.4], [0.2, None], 0.395, None),  # one missing reading: absent
    ],
)
def test_percentile_state(cpus, gpus, expected_cpu, expected_gpu):
    state = percentile_state(_samples(cpus, [0.5] * len(cpus), gpus))
    assert state.cpu_util == pytest.approx(expected_cpu)
    assert state.mem_util == pytest.approx(0.5)
    if expected_gpu is None:
        assert state.gpu_util is None
    else:
        assert state.gpu_util == pytest.approx(expected_gpu)


def test_empty_window_is_an_error():
    with pytest.raises(InvalidInputError):
        percentile_state([])


class _FixedGpu(GpuProbe):
    """A probe reading a constant GPU (tests the plumbing without NVIDIA hardware)."""

    def __init__(self) -> None:
        self._handle = object()
        self._nvml = None

    def read(self):
        return 0.6, 0.25


def test_sampler_reports_gpu_when_a_probe_reads_one():
    sample = MetricsSampler(gpu_probe=_FixedGpu()).sample()
    assert sample.gpu_util == pytest.approx(0.6) and sample.gpu_mem_util == pytest.approx(0.25)


def test_agent_samples_live_and_windows_by_time():
    with NodeAgent(period_s=0.05) as agent:
        agent.wait_for_samples(4)
        mid = time.monotonic()
        time.sleep(0.2)
        agent.wait_for_samples(len(agent.samples()) + 1, timeout_s=30.0)  # one after mid
        state = agent.state()
        later = agent.samples(since_s=mid)
        assert all(s.t_s >= mid for s in later) and len(later) >= 1
        assert 0.0 <= state.cpu_util <= 1.0 and 0.0 < state.mem_util <= 1.0
        if not GpuProbe().available:
            assert state.gpu_util is None and not agent.has_gpu
    assert agent.samples()  # history survives stop


def test_agent_rejects_bad_period():
    with pytest.raises(InvalidInputError):
        NodeAgent(period_s=0)


def test_tree_scope_counts_only_the_tree():
    """A busy child shows up in the tree's CPU; the scope's reading stays a fraction."""
    import subprocess
    import sys

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        sampler = MetricsSampler(cpu_scope=CpuScope.TREE)
        time.sleep(0.5)
        tree_cpu = sampler.sample().cpu_util
    finally:
        busy.kill()
        busy.wait()
    assert 0.0 <= tree_cpu <= 1.0
    assert tree_cpu > 0.02  # the spinning child is part of this process's tree


def test_tree_scope_of_an_idle_process_is_near_zero():
    sleeper = __import__("subprocess").Popen(["sleep", "5"])
    try:
        sampler = MetricsSampler(cpu_scope=CpuScope.TREE, tree_root=sleeper.pid)
        time.sleep(0.3)
        assert sampler.sample().cpu_util < 0.05
    finally:
        sleeper.kill()
        sleeper.wait()
