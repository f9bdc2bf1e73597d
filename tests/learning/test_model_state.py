"""The whole model state: buffers, norm recalibration, and model files that round-trip."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.model_state import (
    ModelFileKind,
    average_buffers,
    buffer_arrays,
    has_norm_statistics,
    load_state,
    model_file_kind,
    read_model_file,
    recalibrate_norms,
    save_model_file,
    state_arrays,
)
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.learning.small_models import make_bn_cnn, make_mlp

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _bn_net(momentum: float | None) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=momentum), nn.ReLU(),
        nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4, momentum=momentum), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(4, 2),
    )  # fmt: skip


def _scripted(model: nn.Module) -> nn.Module:
    return torch.jit.script(model)


def _eager(model: nn.Module) -> nn.Module:
    return model


@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
@pytest.mark.parametrize("wrap", [_eager, _scripted])
def test_recalibration_equals_the_swa_estimate(
    momentum: float | None, wrap: Callable[[nn.Module], nn.Module]
) -> None:
    """Per-batch statistics averaged over the data, read back through any momentum, for
    eager and TorchScript layers alike: what torch's update_bn computes."""
    x = np.random.default_rng(0).normal(2.0, 3.0, size=(256, 3, 8, 8)).astype(np.float32)
    ours, reference = wrap(_bn_net(momentum)), _bn_net(None)
    assert recalibrate_norms(ours, x, batch_size=64, max_samples=256) == 256
    torch.optim.swa_utils.update_bn([torch.tensor(x[i : i + 64]) for i in range(0, 256, 64)],
                                    reference)  # fmt: skip
    for name, value in reference.state_dict().items():
        if "running" in name:
            assert torch.allclose(ours.state_dict()[name], value, atol=1e-5), name
    assert not ours.training


def test_recalibration_leaves_models_without_norm_statistics_alone() -> None:
    model = make_mlp(5, 2)  # LayerNorm: no running statistics
    before = state_arrays(model)
    assert not has_norm_statistics(model)
    assert recalibrate_norms(model, np.ones((10, 5), np.float32)) == 0
    after = state_arrays(model)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_the_factory_buffers_serve_a_bn_model_wrongly() -> None:
    """The defect this module exists for: trained weights with their factory's statistics
    answer differently from the trained model; with its buffers they answer alike."""
    trained = make_bn_cnn(3, 3, width=4, blocks=2)
    recalibrate_norms(trained, np.random.default_rng(1).normal(3, 2, (64, 3, 16, 16)).astype("f"))
    x = torch.rand(4, 3, 16, 16)
    weights_only = make_bn_cnn(3, 3, width=4, blocks=2)
    weights_only.load_state_dict(
        {k: v for k, v in trained.state_dict().items() if k not in buffer_arrays(trained)},
        strict=False,
    )
    whole = load_state(make_bn_cnn(3, 3, width=4, blocks=2), state_arrays(trained))
    trained.eval(), weights_only.eval(), whole.eval()
    assert not torch.allclose(weights_only(x), trained(x))
    assert torch.equal(whole(x), trained(x))


@pytest.mark.parametrize(
    ("pushes", "expected_mean", "expected_count"),
    [
        ([(1.0, 0.0, 3), (3.0, 4.0, 5)], 3.0, 5),  # weighted by samples; counters: the largest
        ([(2.0, 1.0, 1)], 1.0, 1),
        ([(0.0, 9.0, 9), (1.0, 2.0, 2)], 2.0, 2),  # a push of no sample does not count
    ],
)
def test_average_buffers(
    pushes: list[tuple[float, float, int]], expected_mean: float, expected_count: int
) -> None:
    arrays = [
        (w, {"bn.running_mean": np.full(2, m, np.float32), "bn.num_batches_tracked": np.array(c)})
        for w, m, c in pushes
    ]
    out = average_buffers(arrays)
    assert np.allclose(out["bn.running_mean"], expected_mean)
    assert int(out["bn.num_batches_tracked"]) == expected_count
    assert out["bn.running_mean"].dtype == np.float32
    assert average_buffers([]) == {}


def _bn_model() -> nn.Module:
    model = make_bn_cnn(4, 3, width=4, blocks=2)
    recalibrate_norms(model, np.random.default_rng(2).normal(1, 2, (32, 3, 16, 16)).astype("f"))
    return model


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: _bn_model(), ModelFileKind.STATE_DICT),
        (lambda: torch.jit.script(_bn_model()), ModelFileKind.TORCHSCRIPT),
    ],
)
def test_a_model_file_round_trips_with_identical_outputs(
    tmp_path: Path, make: Callable[[], nn.Module], kind: ModelFileKind
) -> None:
    model = make().eval()
    path = tmp_path / "model.pt"
    assert save_model_file(model, path) is kind
    assert model_file_kind(path) is kind
    loaded = read_model_file(path, lambda: make_bn_cnn(4, 3, width=4, blocks=2)).eval()
    x = torch.rand(3, 3, 16, 16)
    assert torch.equal(loaded(x), model(x))
    # and with plain torch, as a user reads it
    plain = (
        torch.jit.load(str(path))
        if kind is ModelFileKind.TORCHSCRIPT
        else load_state(make_bn_cnn(4, 3, width=4, blocks=2), torch.load(path, weights_only=True))
    )
    assert torch.equal(plain.eval()(x), model(x))


def test_a_flat_vector_still_loads(tmp_path: Path) -> None:
    model = make_edge_model(seed=3)
    np.save(tmp_path / "w.npy", get_flat_weights(model))
    assert model_file_kind(tmp_path / "w.npy") is ModelFileKind.FLAT
    loaded = read_model_file(tmp_path / "w.npy", make_edge_model)
    assert np.array_equal(get_flat_weights(loaded), get_flat_weights(model))


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda p: p.write_text("not a model"), "neither a torch.save"),
        (lambda p: torch.save({"x": object()}, p), "not a state_dict of tensors"),
        (lambda p: torch.save(nn.Linear(2, 2).state_dict(), p), "does not match the model"),
        (lambda p: torch.save({**_bn_model().state_dict(), "extra": torch.zeros(1)}, p),
         "unexpected ['extra']"),
        (lambda p: torch.save({k: v[:1] if v.ndim else v for k, v in
                               _bn_model().state_dict().items()}, p), "has shape"),
    ],
)  # fmt: skip
def test_a_wrong_model_file_is_named(
    tmp_path: Path, write: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "bad.pt"
    write(path)
    with pytest.raises(InvalidInputError, match=message.replace("[", r"\[")) as info:
        read_model_file(path, lambda: make_bn_cnn(4, 3, width=4, blocks=2))
    assert info.value.field == "weights"


def test_a_wrapped_checkpoint_is_unwrapped(tmp_path: Path) -> None:
    model = _bn_model()
    torch.save({"epoch": 3, "state_dict": model.state_dict()}, tmp_path / "ckpt.pt")
    loaded = read_model_file(tmp_path / "ckpt.pt", lambda: make_bn_cnn(4, 3, width=4, blocks=2))
    x = torch.rand(2, 3, 16, 16)
    assert torch.equal(loaded.eval()(x), copy.deepcopy(model).eval()(x))
