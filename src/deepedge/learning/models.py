"""The edge model (small CNN) and the golden model (bigger CNN ensemble), plain torch.

* :class:`EdgeCNN` - what the edge devices serve and retrain: two 3x3 conv blocks
  (``width`` and ``2 * width`` channels, ReLU, 2x2 max-pool) and one linear layer.
  With the defaults (16x16 grey input, width 8, 10 classes) it has 3,818 parameters.
* :class:`GoldenModel` - the expensive labeller standing in for ground truth (as in Ekya):
  an ensemble of ``members`` deeper CNNs (three conv blocks, a hidden linear layer,
  dropout) whose softmax outputs are averaged.

Weights cross process boundaries as one flat float32 array in ``model.parameters()``
order (:func:`get_flat_weights`, :func:`set_flat_weights`; the trainable part only:
:func:`get_trainable_flat`); the parameter server works on that representation only.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError


def select_device(prefer: str = "auto") -> torch.device:
    """``"auto"``: CUDA when present, else CPU; ``"cpu"``/``"cuda"`` force the choice.

    Raises :class:`InvalidInputError` when ``"cuda"`` is asked for and none is present.
    """
    if prefer == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if prefer == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError("CUDA was requested but no CUDA device is present", field="device")
    if prefer not in {"cpu", "cuda"}:
        raise InvalidInputError(f"unknown device {prefer!r} (auto, cpu, cuda)", field="device")
    return torch.device(prefer)


def _conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))


class EdgeCNN(nn.Module):
    """conv(1->w) -> pool -> conv(w->2w) -> pool -> linear(2w * (S/4)^2 -> C)."""

    def __init__(self, n_classes: int = 10, image_size: int = 16, width: int = 8) -> None:
        super().__init__()
        if image_size % 4 != 0 or image_size < 8:
            raise InvalidInputError("image_size must be a multiple of 4, >= 8", field="image_size")
        if n_classes < 2 or width < 1:
            raise InvalidInputError("need n_classes >= 2 and width >= 1", field="n_classes")
        self.n_classes = n_classes
        self.image_size = image_size
        self.width = width
        self.features = nn.Sequential(_conv_block(1, width), _conv_block(width, 2 * width))
        self.head: nn.Module = nn.Linear(2 * width * (image_size // 4) ** 2, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class GoldenCNN(nn.Module):
    """Three conv blocks (w, 2w, 4w), a hidden layer of 128 and dropout."""

    def __init__(self, n_classes: int = 10, image_size: int = 16, width: int = 16) -> None:
        super().__init__()
        if image_size % 8 != 0:
            raise InvalidInputError("golden image_size must be a multiple of 8", field="image_size")
        self.features = nn.Sequential(
            _conv_block(1, width), _conv_block(width, 2 * width), _conv_block(2 * width, 4 * width)
        )
        flat = 4 * width * (image_size // 8) ** 2
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(0.25),
            nn.Linear(flat, 128),
            nn.ReLU(),
            nn.Linear(128, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class GoldenModel(nn.Module):
    """Ensemble of :class:`GoldenCNN`; ``forward`` returns the log of the mean softmax."""

    def __init__(
        self, n_classes: int = 10, image_size: int = 16, members: int = 3, width: int = 16
    ) -> None:
        super().__init__()
        if members < 1:
            raise InvalidInputError("members must be >= 1", field="members")
        self.members = nn.ModuleList(
            GoldenCNN(n_classes, image_size, width) for _ in range(members)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.stack([torch.softmax(m(x), dim=1) for m in self.members]).mean(0)
        return torch.log(probs.clamp_min(1e-8))


def make_edge_model(
    n_classes: int = 10, image_size: int = 16, width: int = 8, seed: int = 0
) -> EdgeCNN:
    """A freshly initialised :class:`EdgeCNN`, deterministic in ``seed``."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return EdgeCNN(n_classes, image_size, width)
    finally:
        torch.random.set_rng_state(gen_state)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def get_flat_weights(model: nn.Module) -> np.ndarray:
    """All parameters concatenated in ``model.parameters()`` order (float32, 1-D)."""
    flat = torch.nn.utils.parameters_to_vector(model.parameters())
    return flat.detach().cpu().numpy().astype(np.float32, copy=True)


def set_flat_weights(model: nn.Module, flat: np.ndarray) -> None:
    """Inverse of :func:`get_flat_weights` (in place)."""
    n = parameter_count(model)
    if flat.ndim != 1 or flat.shape[0] != n:
        raise InvalidInputError(f"expected {n} weights, got shape {flat.shape}", field="weights")
    device = next(model.parameters()).device
    with torch.no_grad():
        # A copy: ``flat`` may be a read-only view into Ray's object store.
        vec = torch.tensor(flat, dtype=torch.float32, device=device)
        torch.nn.utils.vector_to_parameters(vec, model.parameters())


def get_flat_gradients(model: nn.Module) -> np.ndarray:
    """All ``.grad`` concatenated like :func:`get_flat_weights` (zeros where absent)."""
    parts = [
        p.grad.detach().reshape(-1) if p.grad is not None else torch.zeros(p.numel())
        for p in model.parameters()
    ]
    return torch.cat([t.cpu() for t in parts]).numpy().astype(np.float32, copy=True)


def layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's layers: modules that own parameters directly, in ``named_modules`` order."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if any(True for _ in module.parameters(recurse=False))
    ]


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an update trains, pushes and checkpoints (``requires_grad``)."""
    return [p for p in model.parameters() if p.requires_grad]


def get_trainable_flat(model: nn.Module) -> np.ndarray:
    """The trainable parameters concatenated in ``model.parameters()`` order (float32, 1-D).

    Equal to :func:`get_flat_weights` when nothing is frozen; frozen parameters never
    leave the process (every process builds them from the same factory).
    """
    params = trainable_parameters(model)
    if not params:
        return np.zeros(0, dtype=np.float32)
    flat = torch.nn.utils.parameters_to_vector(params)
    return flat.detach().cpu().numpy().astype(np.float32, copy=True)


def set_trainable_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Inverse of :func:`get_trainable_flat` (in place; frozen parameters untouched)."""
    params = trainable_parameters(model)
    n = sum(p.numel() for p in params)
    if flat.ndim != 1 or flat.shape[0] != n:
        raise InvalidInputError(
            f"expected {n} trainable weights, got shape {flat.shape}", field="weights"
        )
    device = params[0].device
    with torch.no_grad():
        vec = torch.tensor(flat, dtype=torch.float32, device=device)  # a copy (read-only views)
        torch.nn.utils.vector_to_parameters(vec, params)


def trainable_mask(model: nn.Module) -> np.ndarray:
    """Which entries of :func:`get_flat_weights` are trainable (bool, 1-D): the full
    vector's ``[mask]`` is :func:`get_trainable_flat`'s vector."""
    return np.concatenate(
        [np.full(p.numel(), p.requires_grad, dtype=bool) for p in model.parameters()]
        or [np.zeros(0, dtype=bool)]
    )
