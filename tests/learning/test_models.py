"""Edge and golden models: shapes, weight round trips, device choice, one training step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import (
    GoldenModel,
    get_flat_gradients,
    get_flat_weights,
    make_edge_model,
    select_device,
    set_flat_weights,
)
from deepedge.learning.training import TrainConfig, make_optimizer, training_step


@pytest.mark.parametrize(("size", "classes"), [(8, 2), (16, 10), (32, 5)])
def test_edge_model_output_shape(size: int, classes: int) -> None:
    model = make_edge_model(classes, size)
    assert model(torch.zeros(3, 1, size, size)).shape == (3, classes)


def test_golden_model_outputs_log_probabilities() -> None:
    golden = GoldenModel(10, 16, members=2)
    out = golden(torch.rand(4, 1, 16, 16))
    assert torch.allclose(out.exp().sum(dim=1), torch.ones(4), atol=1e-5)


def test_flat_weight_round_trip_and_seed() -> None:
    a, b = make_edge_model(seed=1), make_edge_model(seed=2)
    assert not np.array_equal(get_flat_weights(a), get_flat_weights(b))
    set_flat_weights(b, get_flat_weights(a))
    np.testing.assert_array_equal(get_flat_weights(a), get_flat_weights(b))
    with pytest.raises(InvalidInputError):
        set_flat_weights(a, np.zeros(3, dtype=np.float32))


def test_training_step_lowers_the_loss_and_fills_gradients() -> None:
    model = make_edge_model(10, 16)
    x = torch.rand(32, 1, 16, 16)
    y = torch.randint(0, 10, (32,))
    opt = make_optimizer(model, TrainConfig(lr=0.05, momentum=0.0))
    first = training_step(model, opt, x, y)
    for _ in range(30):
        last = training_step(model, opt, x, y)
    assert last < first
    assert np.abs(get_flat_gradients(model)).sum() > 0


def test_select_device() -> None:
    assert select_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert select_device("auto").type == expected
    with pytest.raises(InvalidInputError):
        select_device("tpu")


def test_a_cosine_schedule_decays_the_rate_over_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TrainConfig(cosine=True)``: the learning rate follows a half cosine from ``lr`` over
    every step of one ``train_epochs`` call (the golden labeller's training)."""
    import numpy as np

    from deepedge.learning import training
    from deepedge.learning.models import make_edge_model

    seen: list[float] = []
    step = training.training_step

    def recording(
        model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> float:
        seen.append(optimizer.param_groups[0]["lr"])
        return step(model, optimizer, x, y)

    monkeypatch.setattr(training, "training_step", recording)
    images = np.zeros((8, 1, 16, 16), np.float32)
    labels = np.arange(8) % 10
    config = training.TrainConfig(lr=0.1, batch_size=4, cosine=True)
    training.train_epochs(make_edge_model(), images, labels, 2, config)
    assert seen == pytest.approx([0.1, 0.1 * 0.5 * (1 + 2**-0.5), 0.05, 0.1 * 0.5 * (1 - 2**-0.5)])
    seen.clear()
    constant = training.TrainConfig(lr=0.1, batch_size=4)
    training.train_epochs(make_edge_model(), images, labels, 2, constant)
    assert seen == [0.1] * 4
