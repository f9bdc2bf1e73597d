"""A ResNet-18-class network in plain torch: the realistic reference workload.

Architecture (He et al., 2016, the 18-layer variant; ``w = width``, 64 by default)::

    stem      conv 3x3 (3 -> w, stride 2) - GN - ReLU          [64x64 -> 32x32]
              max-pool 3x3 stride 2                             [-> 16x16]
    layer1    2 BasicBlocks, w channels, stride 1               [16x16]
    layer2    2 BasicBlocks, 2w channels, stride 2              [8x8]
    layer3    2 BasicBlocks, 4w channels, stride 2              [4x4]
    layer4    2 BasicBlocks, 8w channels, stride 2              [2x2]
    pool      global average pool, flatten                      [8w]
    head      linear 8w -> C

    BasicBlock(x) = ReLU(GN(conv3x3(ReLU(GN(conv3x3(x))))) + shortcut(x)),
    shortcut = identity, or conv1x1 (stride s) - GN when the shape changes.

With ``w = 64`` and 8 classes it has 11.17M parameters, those of torchvision's ResNet-18
less its 1000-class head (the stem is a 3x3 stride-2 convolution instead of 7x7: the
images are 64x64, not 224x224; the maps of each stage have the same size as ImageNet's
ResNet-18 on 64x64 inputs).

Two departures from the ImageNet model, both for training on edge devices through a
parameter server:

* **GroupNorm instead of BatchNorm.** BatchNorm keeps running statistics in buffers that
  each worker would update on its own shard and that the parameter server never sees;
  GroupNorm has only parameters (affine weight and bias, the same count), so the PS's flat
  vector is the whole trainable state, and it does not depend on the (small, per-device)
  batch size.
* **Frozen backbone option** (:func:`freeze_backbone`): every parameter of ``features``
  gets ``requires_grad = False``, so only the head trains (transfer learning, Ekya's
  "frozen layers" knob at its maximum). The attributes follow
  :class:`deepedge.learning.models.EdgeCNN` (``features`` a sequence of blocks, ``head`` a
  linear layer, ``n_classes``), so the micro-profiler's ``frozen_layers`` freezes the first
  blocks of ``features`` the same way.
* **Frozen convolutions, trainable normalisation** (``train_norms``): the backbone's
  convolutions stay frozen, its GroupNorm scales and shifts (9,600 values at ``w = 64``)
  train with the head. Drift that changes the images' statistics (light, colour cast,
  blur, noise) moves every layer's activations; a per-channel scale and shift in every
  layer can follow it, a head on frozen features cannot (docs/DESIGN.md, "Model update
  under drift"). The update pushes 13.7k values instead of 4.1k, but the backward pass
  now runs through the whole backbone (about 2x the forward, against 3x for the full model).

Forward cost at 64x64, ``w = 64``: about 0.28 GFLOPs (multiply-adds x 2) per image
(:func:`forward_gflops`); a training step costs about 3x the forward pass with every layer
trainable, and about 1x with a frozen backbone (no backward pass through it).
"""

from __future__ import annotations

import torch
from torch import nn

from deepedge.core.errors import InvalidInputError

STAGES = (2, 2, 2, 2)  # BasicBlocks per stage: the 18-layer variant


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, channels), channels)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (module docstring)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _norm(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _norm(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


def _stage(c_in: int, c_out: int, blocks: int, stride: int) -> nn.Sequential:
    layers = [BasicBlock(c_in, c_out, stride)]
    layers += [BasicBlock(c_out, c_out, 1) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


class ResNet18(nn.Module):
    """ResNet-18 on (N, 3, S, S) images in [0, 1] (module docstring)."""

    def __init__(self, n_classes: int = 8, image_size: int = 64, width: int = 64) -> None:
        super().__init__()
        if n_classes < 2 or width < 1:
            raise InvalidInputError("need n_classes >= 2 and width >= 1", field="n_classes")
        if image_size < 32 or image_size % 16 != 0:
            raise InvalidInputError(
                "image_size must be a multiple of 16, >= 32", field="image_size"
            )
        self.n_classes = n_classes
        self.image_size = image_size
        self.width = width
        w = width
        stem = nn.Sequential(
            nn.Conv2d(3, w, 3, stride=2, padding=1, bias=False),
            _norm(w),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.features = nn.Sequential(
            stem,
            _stage(w, w, STAGES[0], 1),
            _stage(w, 2 * w, STAGES[1], 2),
            _stage(2 * w, 4 * w, STAGES[2], 2),
            _stage(4 * w, 8 * w, STAGES[3], 2),
            nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()),
        )
        self.head: nn.Module = nn.Linear(8 * w, n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        # Zero the last norm of each residual branch: every block starts as the identity,
        # which keeps the first steps of training from scratch stable.
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.norm2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


def freeze_backbone(model: ResNet18, train_norms: bool = False) -> ResNet18:
    """Only the head trains: ``requires_grad = False`` on every parameter of ``features``;
    with ``train_norms`` the backbone's GroupNorm scales and shifts train too."""
    for p in model.features.parameters():
        p.requires_grad_(False)
    if train_norms:
        for module in model.features.modules():
            if isinstance(module, nn.GroupNorm):
                for p in module.parameters():
                    p.requires_grad_(True)
    return model


def make_resnet(
    n_classes: int = 8,
    image_size: int = 64,
    width: int = 64,
    seed: int = 0,
    frozen_backbone: bool = False,
    train_norms: bool = False,
) -> ResNet18:
    """A freshly initialised :class:`ResNet18`, deterministic in ``seed``; with
    ``frozen_backbone`` only the head trains, and with ``train_norms`` as well the
    backbone's normalisation layers (:func:`freeze_backbone`)."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = ResNet18(n_classes, image_size, width)
    finally:
        torch.random.set_rng_state(gen_state)
    if train_norms and not frozen_backbone:
        raise InvalidInputError(
            "train_norms applies to a frozen backbone: every parameter trains without it",
            field="train_norms",
        )
    return freeze_backbone(model, train_norms) if frozen_backbone else model


def forward_gflops(model: ResNet18) -> float:
    """Forward-pass GFLOPs per image (2 x multiply-adds of the convolutions and the head)."""
    macs = 0
    size = model.image_size
    hooks = []

    def count(module: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal macs
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            macs += out.shape[1] * out.shape[2] * out.shape[3] * k * module.in_channels
        elif isinstance(module, nn.Linear):
            macs += module.in_features * module.out_features

    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            hooks.append(m.register_forward_hook(count))
    try:
        with torch.no_grad():
            model(torch.zeros(1, 3, size, size))
    finally:
        for h in hooks:
            h.remove()
    return 2.0 * macs / 1e9
