"""The PS applies asynchronous momentum SGD exactly, versions weights, checkpoints atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.runtime.parameter_server import (
    CHECKPOINT_FILE,
    ParameterServer,
    PSCheckpoint,
    load_checkpoint,
    save_checkpoint,
)


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
