"""The PS applies asynchronous momentum SGD exactly, versions weights, checkpoints atomically."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.runtime.training.parameter_server import (
    CHECKPOINT_FILE,
    ParameterServer,
    PSCheckpoint,
    asynchronous_sgd,
    load_checkpoint,
    save_checkpoint,
)
from deepedge.runtime.training.update_config import LrSchedule, lr_scale


@pytest.mark.parametrize(("lr", "momentum"), [(0.1, 0.0), (0.05, 0.9), (1.0, 0.5)])
def test_push_applies_momentum_sgd(lr: float, momentum: float) -> None:
    ps = ParameterServer(np.array([1.0, -2.0], dtype=np.float32), lr=lr, momentum=momentum)
    g1 = np.array([0.5, 1.0], dtype=np.float32)
    g2 = np.array([-1.0, 0.25], dtype=np.float32)
    version, w = ps.push("a", g1, 0)
    assert version == 1
    np.testing.assert_allclose(w, [1.0 - lr * 0.5, -2.0 - lr * 1.0], rtol=1e-6)
    version, w = ps.push("b", g2, 0)  # computed on version 0: one update stale
    u2 = momentum * g1 + g2
    np.testing.assert_allclose(
        w, [1.0 - lr * 0.5 - lr * u2[0], -2.0 - lr * 1.0 - lr * u2[1]], rtol=1e-5
    )
    stats = ps.stats()
    assert stats.version == 2
    assert stats.updates_by_worker == {"a": 1, "b": 1}
    assert stats.max_staleness == 1


def test_wrong_gradient_shape_is_rejected() -> None:
    ps = ParameterServer(np.zeros(3, dtype=np.float32))
    with pytest.raises(InvalidInputError):
        ps.push("a", np.zeros(4, dtype=np.float32), 0)


def test_checkpoint_round_trip_and_periodic(tmp_path: Path) -> None:
    ps = ParameterServer(
        np.zeros(4, dtype=np.float32),
        lr=0.1,
        momentum=0.5,
        checkpoint_dir=str(tmp_path),
        checkpoint_every_updates=2,
    )
    ps.set_meta({"accuracies": [0.5]})
    ps.push("a", np.ones(4, dtype=np.float32), 0)
    assert load_checkpoint(tmp_path) is None
    ps.push("a", np.ones(4, dtype=np.float32), 1)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.version == 2
    assert ckpt.meta == {"accuracies": [0.5]}
    np.testing.assert_array_equal(ckpt.weights, ps.weights)
    restored = ParameterServer.from_checkpoint(ckpt, lr=0.1, momentum=0.5, checkpoint_dir=None)
    v_a, w_a = ps.push("a", np.ones(4, dtype=np.float32), 2)
    v_b, w_b = restored.push("a", np.ones(4, dtype=np.float32), 2)
    assert v_a == v_b == 3
    np.testing.assert_allclose(w_a, w_b)


def test_checkpoint_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    ckpt = PSCheckpoint(np.ones(3, np.float32), np.zeros(3, np.float32), 7, {"k": 1})
    save_checkpoint(tmp_path, ckpt)
    save_checkpoint(tmp_path, ckpt)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9])
def test_weight_average_is_the_moving_average_and_survives_a_checkpoint(
    tmp_path: Path, decay: float
) -> None:
    w0 = np.array([1.0, -1.0, 2.0], dtype=np.float32)
    ps = ParameterServer(
        w0, lr=0.1, momentum=0.5, checkpoint_dir=str(tmp_path), average_decay=decay
    )
    rng = np.random.default_rng(1)
    expected = w0.astype(np.float64)
    for v in range(5):
        _, w = ps.push("a", rng.normal(size=3).astype(np.float32), v)
        expected = decay * expected + (1 - decay) * w if decay else w.astype(np.float64)
    np.testing.assert_allclose(ps.pull_average()[1], expected, rtol=1e-5)
    ps.checkpoint()
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.average is not None
    restored = ParameterServer.from_checkpoint(
        ckpt, lr=0.1, momentum=0.5, checkpoint_dir=None, average_decay=decay
    )
    g = np.array([0.3, -0.2, 0.1], dtype=np.float32)
    ps.push("a", g, 5)
    restored.push("a", g, 5)
    np.testing.assert_allclose(restored.pull_average()[1], ps.pull_average()[1], rtol=1e-6)
    np.testing.assert_allclose(restored.pull()[1], ps.pull()[1], rtol=1e-6)


@pytest.mark.parametrize("decay", [-0.1, 1.0])
def test_bad_average_decay_is_rejected(decay: float) -> None:
    with pytest.raises(InvalidInputError):
        ParameterServer(np.zeros(2, dtype=np.float32), average_decay=decay)


@pytest.mark.parametrize(
    ("lr", "momentum", "workers", "momentum_e"),
    [
        (0.05, 0.9, 1, 0.9),  # one worker: no asynchrony, the pair as it is
        (0.05, 0.9, 2, 0.4),  # asynchrony adds 0.5
        (0.05, 0.9, 4, 0.15),  # adds 0.75
        (0.05, 0.9, 10, 0.0),  # adds 0.9: nothing left to add
        (0.2, 0.0, 4, 0.0),  # plain SGD stays plain (the digits' default)
    ],
)
def test_asynchronous_sgd_adds_only_the_momentum_asynchrony_does_not(
    lr: float, momentum: float, workers: int, momentum_e: float
) -> None:
    got_lr, got_momentum = asynchronous_sgd(lr, momentum, workers)
    assert got_momentum == pytest.approx(momentum_e)
    # the per-push rate is never raised above the configured one (a stale gradient at a
    # rescaled 0.425 threw a trained ResNet off its minimum)
    assert got_lr == pytest.approx(lr)
    # the asynchrony's momentum and the PS's together are the configured momentum, while
    # there is room for it
    assert got_momentum + (1 - 1 / workers) == pytest.approx(max(momentum, 1 - 1 / workers))


@pytest.mark.parametrize(
    ("lr", "momentum", "workers"), [(0.0, 0.9, 4), (0.1, 1.0, 4), (0.1, 0.5, 0)]
)
def test_asynchronous_sgd_rejects_bad_inputs(lr: float, momentum: float, workers: int) -> None:
    with pytest.raises(InvalidInputError):
        asynchronous_sgd(lr, momentum, workers)


def _buffers(mean: float, count: int) -> dict[str, np.ndarray]:
    return {
        "bn.running_mean": np.full(2, mean, np.float32),
        "bn.num_batches_tracked": np.array(count),
    }


def test_the_ps_owns_the_buffers_averaged_over_each_epochs_pushes(tmp_path: Path) -> None:
    ps = ParameterServer(np.zeros(2, np.float32), checkpoint_dir=str(tmp_path),
                         buffers=_buffers(0.0, 0))  # fmt: skip
    ps.push_buffers("a", 1, 10, _buffers(1.0, 3))
    ps.push_buffers("b", 1, 30, _buffers(5.0, 4))
    assert np.allclose(ps.pull_buffers()["bn.running_mean"], 4.0)  # (10 x 1 + 30 x 5) / 40
    ps.push_buffers("a", 2, 10, _buffers(2.0, 6))  # a new epoch starts a new average
    assert np.allclose(ps.pull_buffers()["bn.running_mean"], 2.0)
    ps.push_buffers("b", 1, 30, _buffers(9.0, 9))  # a straggler of the old epoch: ignored
    assert np.allclose(ps.pull_buffers()["bn.running_mean"], 2.0)
    with pytest.raises(InvalidInputError):
        ps.push_buffers("a", 2, 10, {"other": np.zeros(1, np.float32)})
    ps.checkpoint()
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and np.allclose(ckpt.buffers["bn.running_mean"], 2.0)
    restored = ParameterServer.from_checkpoint(ckpt, lr=0.1, momentum=0.0, checkpoint_dir=None)
    assert int(restored.pull_buffers()["bn.num_batches_tracked"]) == 6


def test_adam_on_the_ps_steps_like_torch_adamw_and_survives_a_checkpoint(tmp_path: Path) -> None:
    import torch

    w0 = np.array([1.0, -2.0, 0.5], np.float32)
    ps = ParameterServer(w0, lr=0.01, optimizer="adam", weight_decay=0.1,
                         checkpoint_dir=str(tmp_path))  # fmt: skip
    param = torch.nn.Parameter(torch.tensor(w0))
    reference = torch.optim.AdamW([param], lr=0.01, weight_decay=0.1)
    rng = np.random.default_rng(0)
    for v in range(4):
        g = rng.normal(size=3).astype(np.float32)
        _, w = ps.push("a", g, v)
        param.grad = torch.tensor(g)
        reference.step()
        np.testing.assert_allclose(w, param.detach().numpy(), rtol=1e-5, atol=1e-7)
    ps.checkpoint()
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.second is not None and ckpt.steps == 4
    restored = ParameterServer.from_checkpoint(
        ckpt, lr=0.01, momentum=0.0, checkpoint_dir=None, optimizer="adam", weight_decay=0.1
    )
    g = np.ones(3, np.float32)
    np.testing.assert_allclose(restored.push("a", g, 4)[1], ps.push("a", g, 4)[1], rtol=1e-6)


def test_an_unknown_optimizer_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        ParameterServer(np.zeros(2, np.float32), optimizer="rmsprop")


def test_the_schedules_factor_scales_every_step_from_then_on() -> None:
    ps = ParameterServer(weights=np.zeros(3, dtype=np.float32), lr=0.1, momentum=0.0)
    g = np.ones(3, dtype=np.float32)
    ps.push("w", g, 0)
    ps.set_lr_scale(0.25)
    version, w = ps.push("w", g, 1)
    assert version == 2
    np.testing.assert_allclose(w, -(0.1 + 0.025) * np.ones(3), rtol=1e-6)
    with pytest.raises(InvalidInputError, match="lr scale"):
        ps.set_lr_scale(1.5)


@pytest.mark.parametrize(
    ("schedule", "epoch", "expected"),
    [(LrSchedule.CONSTANT, 7, 1.0),
     (LrSchedule.COSINE, 1, 1.0),  # the first epoch at the full rate
     (LrSchedule.COSINE, 6, 0.5),  # half-way through 10
     (LrSchedule.COSINE, 10, 0.5 * (1 + math.cos(0.9 * math.pi))),  # the last, small
     (LrSchedule.COSINE, 12, 0.0)],  # past the planned epochs: nothing more to learn
)  # fmt: skip
def test_the_cosine_schedule_goes_from_the_rate_to_nothing(
    schedule: LrSchedule, epoch: int, expected: float
) -> None:
    assert lr_scale(schedule, epoch, 10) == pytest.approx(expected)
