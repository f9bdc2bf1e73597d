"""A BatchNorm model through the asynchronous update keeps its running statistics: the
model returned serves what its validation measured (either source of the statistics), and
a diverging update stops at once; on either executor (threads, and Ray where marked)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from deepedge.core.errors import RunFailedError
from deepedge.learning.convergence import StoppingRule
from deepedge.learning.model_state import buffer_arrays
from deepedge.learning.models import get_flat_weights
from deepedge.learning.small_models import make_bn_cnn, make_mlp
from deepedge.learning.training import accuracy
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.testbed import paper_testbed
from deepedge.runtime.training.update import UpdateConfig, run_model_update
from deepedge.runtime.training.update_config import NormStatistics, UpdateExecutor

factory = functools.partial(make_bn_cnn, 2, 1, 4, 2, 0)
PLAN = ShardPlan(
    policy=Policy.DEEP_EDGE, feasible=True, dataset_size=120,
    workers=[WorkerAssignment(id="tx2-1", selected=True, shard=60, batch_size=16),
             WorkerAssignment(id="nano-1", selected=True, shard=60, batch_size=16),
             WorkerAssignment(id="nano-2", selected=False, shard=0, batch_size=0),
             WorkerAssignment(id="nano-3", selected=False, shard=0, batch_size=0)],
)  # fmt: skip


@pytest.fixture(
    params=[UpdateExecutor.THREADS, pytest.param(UpdateExecutor.RAY, marks=pytest.mark.ray)]
)
def executor(request: pytest.FixtureRequest) -> UpdateExecutor:
    """Each executor in turn; Ray's test gets the module's Ray."""
    if request.param is UpdateExecutor.RAY:
        request.getfixturevalue("ray_cluster")
    kind: UpdateExecutor = request.param
    return kind


def _data() -> tuple[np.ndarray, np.ndarray]:
    """Bright (class 1) or dark (class 0) 8x8 images far from the factory's (0, 1)
    statistics: served with the factory's buffers, the model sees every input alike."""
    rng = np.random.default_rng(0)
    y = np.arange(120) % 2
    x = rng.normal(5.0 + 3.0 * y[:, None, None, None], 1.0, size=(120, 1, 8, 8))
    return x.astype(np.float32), y.astype(np.int64)


@pytest.mark.parametrize("source", list(NormStatistics))
def test_the_updated_model_serves_with_its_statistics(
    executor: UpdateExecutor, tmp_path: Path, source: NormStatistics
) -> None:
    x, y = _data()
    start = factory()
    result = run_model_update(
        paper_testbed(120), (x, y), (x, y), factory, get_flat_weights(start), tmp_path,
        plan=PLAN, resume=False,
        config=UpdateConfig(time_scale=0.0, norm_statistics=source, lr=0.05, momentum=0.3,
                            stopping=StoppingRule(min_epochs=2, max_epochs=4),
                            executor=executor),
    )  # fmt: skip
    assert set(result.buffers) == set(buffer_arrays(start))
    # The data's statistics, not the factory's zeros: the images sit far from (0, 1), so
    # some channel's running mean moves well away from 0 whichever source averaged it.
    key = "features.0.1.running_mean"
    moved = result.buffers[key] - buffer_arrays(start)[key]
    assert float(np.abs(moved).max()) > 0.5
    served = accuracy(result.model(factory), x, y)
    assert served == pytest.approx(result.final_accuracy)  # serves what it was scored at
    if source is NormStatistics.RECALIBRATE:  # statistics for the weights scored, at once
        weights_only = factory()
        state = result.model(factory).state_dict() | buffer_arrays_as_torch(start)
        weights_only.load_state_dict(state)
        assert served >= 0.9 > accuracy(weights_only, x, y)


def buffer_arrays_as_torch(model: object) -> dict[str, object]:
    import torch

    return {k: torch.tensor(v) for k, v in buffer_arrays(model).items()}  # type: ignore[arg-type]


linear = functools.partial(make_mlp, 64, 2, (), 0.0)  # no hidden layer: a linear model


def test_a_diverging_update_fails_at_once(executor: UpdateExecutor, tmp_path: Path) -> None:
    """Steps of 2e37 (the gradient is clipped to norm 2) overflow float32 in two epochs:
    the update stops there with the cause, not after its epochs of NaN."""
    x, y = _data()
    with pytest.raises(RunFailedError, match=r"diverged in epoch [1-3]: its weights"):
        run_model_update(
            paper_testbed(120), (x, y), (x, y), linear, get_flat_weights(linear()),
            tmp_path, plan=PLAN, resume=False,
            config=UpdateConfig(time_scale=0.0, lr=1e37, momentum=0.0, average_epochs=0.0,
                                stopping=StoppingRule(max_epochs=8), executor=executor),
        )  # fmt: skip
