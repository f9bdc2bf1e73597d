"""Only trainable parameters travel: frozen layers are neither pushed, pulled, changed nor
checkpointed, with float32 and float16 gradients, on the worker/PS level and through a
whole update."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import ray

from deepedge.learning.convergence import StoppingRule
from deepedge.learning.models import get_flat_weights, trainable_mask
from deepedge.learning.resnet import make_resnet
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.gradient_channel import GradientEncoding
from deepedge.runtime.training.parameter_server import ParameterServer, load_checkpoint
from deepedge.runtime.training.testbed import paper_testbed
from deepedge.runtime.training.update import UpdateConfig, run_model_update
from deepedge.runtime.training.worker import TrainingWorker

pytestmark = pytest.mark.ray

# A small ResNet (width 8) whose whole backbone, the prefix of its parameters, is frozen:
# 260 trainable values (the head, 64 x 4 + 4) of 176,012.
HEAD = 260
frozen_factory = functools.partial(make_resnet, 4, 32, 8, 0, True)


def _initial_weights() -> np.ndarray:
    """The factory's weights with the frozen part moved: the workers must take the frozen
    values from the update's initial weights, not from their own factory."""
    model = frozen_factory()
    weights = get_flat_weights(model)
    mask = trainable_mask(model)
    weights[~mask] += 0.01
    return weights


def _data(n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((n, 3, 32, 32), dtype=np.float32), rng.integers(0, 4, n)


def test_the_trainable_mask_is_the_frozen_prefixs_complement() -> None:
    model = frozen_factory()
    mask = trainable_mask(model)
    assert mask.shape == (sum(p.numel() for p in model.parameters()),)
    assert mask.sum() == HEAD and mask[-HEAD:].all() and not mask[:-HEAD].any()


@pytest.mark.parametrize("encoding", list(GradientEncoding))
def test_a_worker_pushes_only_trainable_values_and_keeps_frozen_ones(
    ray_cluster: None, encoding: GradientEncoding, tmp_path: Path
) -> None:
    initial = _initial_weights()
    mask = trainable_mask(frozen_factory())
    ps = ray.remote(ParameterServer).remote(
        weights=initial[mask], lr=0.1, momentum=0.5, checkpoint_dir=str(tmp_path)
    )
    channel = ray.get(ps.open_channel.remote())
    worker = TrainingWorker(
        "w0",
        frozen_factory,
        batch_size=8,
        push_window=1,
        initial_weights=initial,
        gradient_encoding=encoding,
    )
    worker.load_shard(_data())
    stats = worker.run_epoch(ps, 1, channel)
    ps_stats = ray.get(ps.stats.remote())
    assert stats.steps == 6 and ps_stats.version == 6
    assert ps_stats.size == HEAD  # the PS holds (and every push carried) the head only
    assert stats.peak_rss_mb >= stats.rss_mb > 0 and ps_stats.peak_rss_mb > 0
    after = get_flat_weights(worker.model)
    np.testing.assert_array_equal(after[~mask], initial[~mask])  # frozen: untouched
    assert not np.allclose(after[mask], initial[mask])  # the head trained
    ray.get(ps.checkpoint.remote())
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.weights.shape == (HEAD,)  # no frozen value checkpointed
    ray.kill(ps)


def test_an_update_of_a_frozen_backbone_changes_only_the_head(
    ray_cluster: None, tmp_path: Path
) -> None:
    initial = _initial_weights()
    mask = trainable_mask(frozen_factory())
    x, y = _data(96)
    plan = ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=80,
        workers=[
            WorkerAssignment(id="tx2-1", selected=True, shard=40, batch_size=8),
            WorkerAssignment(id="nano-1", selected=True, shard=40, batch_size=8),
            WorkerAssignment(id="nano-2", selected=False, shard=0, batch_size=0),
            WorkerAssignment(id="nano-3", selected=False, shard=0, batch_size=0),
        ],
    )
    result = run_model_update(
        paper_testbed(80),
        (x[:80], y[:80]),
        (x[80:], y[80:]),
        frozen_factory,
        initial,
        tmp_path,
        plan=plan,
        config=UpdateConfig(
            time_scale=0.0,
            stopping=StoppingRule(min_epochs=2, max_epochs=2, min_gain=0.0),
            gradient_encoding=GradientEncoding.FLOAT16,
        ),
        resume=False,
    )
    assert result.weights.shape == initial.shape
    np.testing.assert_array_equal(result.weights[~mask], initial[~mask])
    assert not np.allclose(result.weights[mask], initial[mask])
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.weights.shape == (HEAD,)
    assert all(w.peak_rss_mb > 0 for e in result.epochs for w in e.workers)
