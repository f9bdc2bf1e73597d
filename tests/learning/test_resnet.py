"""The ResNet-18-class workload model: size, shapes, seed, frozen backbone, FLOPs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import get_flat_weights, parameter_count
from deepedge.learning.resnet import forward_gflops, freeze_backbone, make_resnet
from deepedge.learning.training import TrainConfig, make_optimizer, training_step


@pytest.fixture(scope="module")
def resnet() -> torch.nn.Module:
    return make_resnet(8, 64)


def test_resnet_has_resnet18_size_and_no_buffers(resnet: torch.nn.Module) -> None:
    # torchvision's ResNet-18 without its 1000-class head: 11.18M; ours has an 8-class head
    assert 11_000_000 < parameter_count(resnet) < 11_300_000
    assert list(resnet.buffers()) == []  # GroupNorm: nothing the PS would not see


@pytest.mark.parametrize(("size", "classes"), [(32, 2), (64, 8)])
def test_resnet_output_shape(size: int, classes: int) -> None:
    model = make_resnet(classes, size, width=8)
    assert model(torch.rand(2, 3, size, size)).shape == (2, classes)


def test_resnet_is_deterministic_in_its_seed() -> None:
    a, b, c = (make_resnet(4, 32, width=8, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(get_flat_weights(a), get_flat_weights(b))
    assert not np.array_equal(get_flat_weights(a), get_flat_weights(c))


def test_forward_flops_match_the_architecture(resnet: torch.nn.Module) -> None:
    # 64x64: about 0.28 GFLOPs; the cost grows with the square of the image side
    assert forward_gflops(resnet) == pytest.approx(0.28, rel=0.05)
    assert forward_gflops(make_resnet(8, 128)) == pytest.approx(
        4 * forward_gflops(resnet), rel=0.02
    )


def test_frozen_backbone_trains_only_the_head() -> None:
    model = make_resnet(4, 32, width=8, frozen_backbone=True)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["head.weight", "head.bias"]
    before = [p.detach().clone() for p in model.features.parameters()]
    head_before = model.head.weight.detach().clone()
    opt = make_optimizer(model, TrainConfig(lr=0.1, momentum=0.9))
    x, y = torch.rand(8, 3, 32, 32), torch.randint(0, 4, (8,))
    for _ in range(3):
        training_step(model, opt, x, y)
    for old, new in zip(before, model.features.parameters(), strict=True):
        assert torch.equal(old, new)
    assert not torch.equal(head_before, model.head.weight)


def test_freeze_backbone_in_place() -> None:
    model = make_resnet(4, 32, width=8)
    assert freeze_backbone(model) is model
    assert not any(p.requires_grad for p in model.features.parameters())


def test_train_norms_trains_the_head_and_every_group_norm_only() -> None:
    model = make_resnet(4, 32, width=8, frozen_backbone=True, train_norms=True)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    norms = {
        f"{name}.{p}"
        for name, module in model.named_modules()
        if isinstance(module, nn.GroupNorm)
        for p in ("weight", "bias")
    }
    assert trainable == norms | {"head.weight", "head.bias"}
    assert len(norms) == 2 * 20  # stem 1 + 8 blocks x 2 + 3 downsampling shortcuts
    convs = [m.weight.detach().clone() for m in model.modules() if isinstance(m, nn.Conv2d)]
    opt = make_optimizer(model, TrainConfig(lr=0.1, momentum=0.9))
    x, y = torch.rand(8, 3, 32, 32), torch.randint(0, 4, (8,))
    gn = model.features[0][1].weight.detach().clone()
    for _ in range(3):
        training_step(model, opt, x, y)
    after = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert all(torch.equal(a, b) for a, b in zip(convs, after, strict=True))
    assert not torch.equal(gn, model.features[0][1].weight)


def test_train_norms_needs_a_frozen_backbone() -> None:
    with pytest.raises(InvalidInputError):
        make_resnet(4, 32, width=8, train_norms=True)


@pytest.mark.parametrize(
    ("classes", "size", "width"), [(1, 64, 8), (4, 40, 8), (4, 16, 8), (4, 64, 0)]
)
def test_bad_shapes_are_refused(classes: int, size: int, width: int) -> None:
    with pytest.raises(InvalidInputError):
        make_resnet(classes, size, width)
