"""The worker's fresh-wait rule: wait for a push's reply when the round trip is cheap."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepedge.runtime.training.parameter_server import ParameterServer
from deepedge.runtime.training.ps_link import DirectLink
from deepedge.runtime.training.worker import LossKind, TrainingWorker, fresh_wait


@pytest.mark.parametrize(
    ("rtt_s", "compute_s", "frac", "wait"),
    [
        (0.0002, 0.126, 0.05, True),  # the ResNet head: 16 KB on the wire
        (0.002, 0.013, 0.05, False),  # digits: the round trip is 15 % of a batch
        (0.3, 0.385, 0.05, False),  # the whole ResNet: 45 MB each way
        (0.005, 0.1, 0.05, True),  # exactly at the bound
        (0.0001, 1.0, 0.0, False),  # 0: always pipeline
        (None, 1.0, 0.05, False),  # nothing measured yet
        (0.0001, None, 0.05, False),
    ],
)
def test_fresh_wait_rule(
    rtt_s: float | None, compute_s: float | None, frac: float, wait: bool
) -> None:
    assert fresh_wait(rtt_s, compute_s, frac) is wait


@pytest.mark.parametrize(("frac", "expect_waits"), [(0.0, False), (1e9, True)])
def test_worker_waits_for_its_reply_when_the_rule_says_so(frac: float, expect_waits: bool) -> None:
    torch.manual_seed(0)
    worker = TrainingWorker(
        "w",
        lambda: nn.Linear(4, 3),
        4,
        None,
        LossKind.CLASSIFICATION,
        push_window=1,
        fresh_wait_frac=frac,
    )
    rng = np.random.default_rng(0)
    worker.load_shard((rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 3, 32)))
    weights = np.concatenate([p.detach().reshape(-1).numpy() for p in worker.params])
    ps = ParameterServer(weights, lr=0.1, momentum=0.0)
    # the PS in this process (the threads executor's link), pushed from the push thread
    stats = [worker.train_epoch(DirectLink(ps, "w"), epoch) for epoch in (1, 2)]
    assert [s.steps for s in stats] == [8, 8]
    if expect_waits:
        # The first push has no measured round trip yet; every later one is waited for,
        # and the averages carry over to the next epoch.
        assert [s.fresh_waits for s in stats] == [7, 8]
        # Every step after the first starts on the reply of the worker's previous push.
        assert ps.stats().max_staleness <= 1
    else:
        assert [s.fresh_waits for s in stats] == [0, 0]
    assert ps.stats().version == 16
