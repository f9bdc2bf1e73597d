"""The whole state of a model: its parameters *and* its buffers, in memory and on disk.

A trained model is everything its ``state_dict`` holds: the parameters, and the buffers
(BatchNorm's running mean and variance and batch counter, or any buffer a user's model
registers). A model served with its parameters but its factory's buffers computes with
the statistics of no data at all (a MobileNet's BatchNorm at ``running_mean = 0``,
``running_var = 1`` scores chance), so every copy of a model deepedge makes carries both.

* **In memory**, between processes: :data:`State`, the ``state_dict`` as numpy arrays
  (picklable, and safe to read from Ray's read-only object store): :func:`state_arrays`,
  :func:`load_state`; the buffers alone: :func:`buffer_arrays`, :func:`load_buffers`.
  The parameter server's flat vector of trainable parameters stays the fast path of an
  update (:mod:`deepedge.learning.models`); the buffers travel beside it.
* **Norm statistics**: after an asynchronous update (whose served weights are an average
  no worker computed its statistics with) the running statistics are recomputed on
  training data (:func:`recalibrate_norms`), or averaged over the workers' own
  (:func:`average_buffers`).
* **On disk** (:func:`save_model_file`, :func:`read_model_file`): the format the user
  gave, a ``torch.save`` of the ``state_dict`` for a model built by an entry point, a
  ``torch.jit.save`` archive for a TorchScript model; both load back with ``torch.load``
  (``weights_only=True``) or ``torch.jit.load``. A legacy flat float32 ``.npy`` of the
  parameters is still read (its buffers are the factory's).
"""

from __future__ import annotations

import enum
import io
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from deepedge.core.durable import write_atomically
from deepedge.core.errors import InvalidInputError

State = dict[str, np.ndarray]
"""A model's ``state_dict`` as numpy arrays (parameters and buffers, by name)."""

NORM_BUFFERS = ("running_mean", "running_var")
_NPY_MAGIC = b"\x93NUMPY"


class ModelFileKind(enum.StrEnum):
    """What a model file on disk holds."""

    STATE_DICT = "state-dict"  # torch.save(model.state_dict())
    TORCHSCRIPT = "torchscript"  # torch.jit.save(scripted or traced model)
    FLAT = "flat"  # legacy: numpy .npy of the flat float32 parameters


def state_arrays(model: nn.Module) -> State:
    """A picklable copy of the model's whole ``state_dict`` (parameters and buffers)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}


def parameter_names(model: nn.Module) -> set[str]:
    return {name for name, _ in model.named_parameters()}


def buffer_arrays(model: nn.Module) -> State:
    """The buffers of the model's ``state_dict`` (no parameter), as numpy copies."""
    params = parameter_names(model)
    return {k: v for k, v in state_arrays(model).items() if k not in params}


def _tensor(value: np.ndarray | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    # A copy: arrays from Ray's object store are read-only.
    return torch.tensor(np.asarray(value), dtype=like.dtype, device=like.device)


def load_state(model: nn.Module, state: Mapping[str, np.ndarray | torch.Tensor]) -> nn.Module:
    """Load a whole :data:`State` into ``model`` (in place, names and shapes checked);
    returns ``model``. Raises :class:`InvalidInputError` naming the first mismatch."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise InvalidInputError(
            "weights: the state does not match the model"
            + (f"; missing {missing[:4]}" if missing else "")
            + (f"; unexpected {unexpected[:4]}" if unexpected else ""),
            field="weights",
        )
    for name, value in state.items():
        if tuple(np.shape(value)) != tuple(own[name].shape):
            raise InvalidInputError(
                f"weights: {name} has shape {tuple(np.shape(value))}, the model's "
                f"{tuple(own[name].shape)}",
                field="weights",
            )
    model.load_state_dict({k: _tensor(v, own[k]) for k, v in state.items()})
    return model


def load_buffers(model: nn.Module, buffers: Mapping[str, np.ndarray]) -> None:
    """Copy ``buffers`` (a subset of the model's buffers, by name) into ``model``."""
    own = dict(model.named_buffers())
    unknown = sorted(set(buffers) - set(own))
    if unknown:
        raise InvalidInputError(f"weights: unknown buffers {unknown[:4]}", field="weights")
    with torch.no_grad():
        for name, value in buffers.items():
            target = own[name]
            if tuple(np.shape(value)) != tuple(target.shape):
                raise InvalidInputError(
                    f"weights: buffer {name} has shape {tuple(np.shape(value))}, the model's "
                    f"{tuple(target.shape)}",
                    field="weights",
                )
            target.copy_(_tensor(value, target))


def average_buffers(pushes: Iterable[tuple[float, Mapping[str, np.ndarray]]]) -> State:
    """The buffers of several copies of one model, each pushed with a weight (its samples):
    floating-point buffers (running statistics) are the weighted mean, integer ones (batch
    counters) the largest. Empty when nothing was pushed."""
    pushes = [(float(w), b) for w, b in pushes if w > 0]
    if not pushes:
        return {}
    total = sum(w for w, _ in pushes)
    out: State = {}
    for name, first in pushes[0][1].items():
        values = [np.asarray(b[name]) for _, b in pushes]
        if np.issubdtype(first.dtype, np.floating):
            mean = np.zeros(first.shape, dtype=np.float64)
            for (w, _), v in zip(pushes, values, strict=True):
                mean += w * v.astype(np.float64)
            out[name] = (mean / total).astype(first.dtype)
        else:
            out[name] = np.max(np.stack(values), axis=0).astype(first.dtype)
    return out


def norm_layers(model: nn.Module) -> list[nn.Module]:
    """Modules that keep running statistics (BatchNorm and its kin, TorchScript included):
    those owning ``running_mean`` and ``running_var`` buffers directly."""
    found = []
    for module in model.modules():
        own = {name for name, _ in module.named_buffers(recurse=False)}
        if set(NORM_BUFFERS) <= own:
            found.append(module)
    return found


def has_norm_statistics(model: nn.Module) -> bool:
    return bool(norm_layers(model))


@torch.no_grad()
def recalibrate_norms(
    model: nn.Module,
    images: np.ndarray,
    batch_size: int = 64,
    max_samples: int = 1024,
    seed: int = 0,
) -> int:
    """Recompute every norm layer's running statistics on ``images`` (at most
    ``max_samples``, a seeded sample); returns the samples used (0: nothing to do).

    Each layer's statistics become the sample-weighted mean of its per-batch statistics in
    a training-mode forward pass (each layer sees its input as training normalised it),
    the rest of the model in evaluation mode (no dropout): the estimate of
    ``torch.optim.swa_utils.update_bn``. Written for any momentum, TorchScript layers too:
    with the statistics reset to ``(0, 1)`` before each batch, one forward pass leaves
    ``m * batch_stat + (1 - m) * reset`` in the buffers, from which the batch's statistic
    is read back. The model is left in evaluation mode.
    """
    layers = norm_layers(model)
    if not layers or len(images) < 2:
        return 0
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(images), min(max_samples, len(images)), replace=False))
    device = next(iter(model.parameters())).device
    sums: list[tuple[torch.Tensor, torch.Tensor]] = []
    momenta = [_momentum(layer) for layer in layers]
    model.eval()
    for layer in layers:
        layer.train()
        mean, var = _stats(layer)
        sums.append((torch.zeros_like(mean, dtype=torch.float64),
                     torch.zeros_like(var, dtype=torch.float64)))  # fmt: skip
    used = 0
    for start in range(0, len(chosen), batch_size):
        idx = chosen[start : start + batch_size]
        if len(idx) < 2:  # a one-sample batch has no variance
            break
        for layer in layers:
            _reset(layer)
        model(torch.as_tensor(images[idx], dtype=torch.float32, device=device))
        for layer, m, (mean_sum, var_sum) in zip(layers, momenta, sums, strict=True):
            mean, var = _stats(layer)
            mean_sum += len(idx) * (mean.double() / m)
            var_sum += len(idx) * ((var.double() - (1.0 - m)) / m)
        used += len(idx)
    for layer, (mean_sum, var_sum) in zip(layers, sums, strict=True):
        mean, var = _stats(layer)
        if used:
            mean.copy_((mean_sum / used).to(mean.dtype))
            var.copy_((var_sum / used).clamp_min(0.0).to(var.dtype))
        counter = dict(layer.named_buffers(recurse=False)).get("num_batches_tracked")
        if counter is not None:
            counter.fill_(max(1, used // batch_size))
    model.eval()
    return used


def _stats(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    own = dict(layer.named_buffers(recurse=False))
    return own["running_mean"], own["running_var"]


def _momentum(layer: nn.Module) -> float:
    """The layer's momentum; None (a cumulative average) reads back like 1 after a reset."""
    momentum = getattr(layer, "momentum", 0.1)
    return 1.0 if momentum is None else float(momentum)


def _reset(layer: nn.Module) -> None:
    mean, var = _stats(layer)
    mean.zero_()
    var.fill_(1.0)
    counter = dict(layer.named_buffers(recurse=False)).get("num_batches_tracked")
    if counter is not None:
        counter.zero_()


# -- files -----------------------------------------------------------------------------


def model_file_kind(path: Path) -> ModelFileKind:
    """What ``path`` holds: a TorchScript archive, a saved ``state_dict`` or a flat ``.npy``
    (:class:`InvalidInputError` otherwise)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise InvalidInputError(f"weights: cannot read {path}: {exc}", field="weights") from exc
    if head == _NPY_MAGIC:
        return ModelFileKind.FLAT
    if not zipfile.is_zipfile(path):
        raise InvalidInputError(
            f"weights: {path} is neither a torch.save / torch.jit.save file nor a .npy",
            field="weights",
        )
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if any("/code/" in n or n.endswith("constants.pkl") for n in names):
        return ModelFileKind.TORCHSCRIPT
    return ModelFileKind.STATE_DICT


def read_state_file(path: Path) -> State:
    """The ``state_dict`` a ``torch.save`` file holds (tensors only: ``weights_only``).

    A checkpoint that wraps it (``{"state_dict": ...}`` or ``{"model": ...}``, as training
    scripts often save) is unwrapped."""
    try:
        raw: Any = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle of arbitrary objects is refused by weights_only
        first = (str(exc).splitlines() or [""])[0]
        raise InvalidInputError(
            f"weights: {path} is not a state_dict of tensors ({type(exc).__name__}: {first})",
            field="weights",
        ) from exc
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(raw, Mapping) and isinstance(raw.get(key), Mapping):
            raw = raw[key]
    if not isinstance(raw, Mapping) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise InvalidInputError(
            f"weights: {path} holds {type(raw).__name__}, not a state_dict of tensors",
            field="weights",
        )
    return {str(k): v.detach().cpu().numpy() for k, v in raw.items()}


def load_model_file(model: nn.Module, path: Path) -> nn.Module:
    """Load the whole state of the file at ``path`` (any :class:`ModelFileKind`) into
    ``model`` in place; returns it. A TorchScript archive gives its ``state_dict`` (its
    code must be ``model``'s); a flat ``.npy`` its parameters only."""
    kind = model_file_kind(path)
    if kind is ModelFileKind.FLAT:
        from deepedge.learning.models import set_flat_weights

        try:
            flat = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"weights: {path}: {exc}", field="weights") from exc
        set_flat_weights(model, np.asarray(flat, dtype=np.float32).reshape(-1))
        return model
    if kind is ModelFileKind.TORCHSCRIPT:
        try:
            scripted = torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:
            raise InvalidInputError(
                f"weights: cannot load TorchScript {path}: {type(exc).__name__}: {exc}",
                field="weights",
            ) from exc
        return load_state(model, state_arrays(scripted))
    return load_state(model, read_state_file(path))


def read_model_file(path: Path, factory: Callable[[], nn.Module]) -> nn.Module:
    """``factory()`` (with its frozen layers) loaded with the whole state of ``path``."""
    return load_model_file(factory(), path)


def is_torchscript(model: nn.Module) -> bool:
    return isinstance(model, torch.jit.ScriptModule)


def save_model_file(model: nn.Module, path: Path) -> ModelFileKind:
    """Write ``model`` atomically (temporary file, fsync, rename, fsync of the folder): a
    TorchScript model as a TorchScript archive, any other as its ``state_dict``."""
    buffer = io.BytesIO()
    if is_torchscript(model):
        torch.jit.save(model, buffer)
        kind = ModelFileKind.TORCHSCRIPT
    else:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buffer)
        kind = ModelFileKind.STATE_DICT
    write_atomically(path, buffer.getvalue())
    return kind


@torch.no_grad()
def same_outputs(a: nn.Module, b: nn.Module, example: torch.Tensor, atol: float = 1e-5) -> bool:
    """Whether two models answer ``example`` alike (evaluation mode): the round-trip check
    of an export."""
    a.eval()
    b.eval()
    out_a, out_b = a(example), b(example)
    return bool(out_a.shape == out_b.shape and torch.allclose(out_a, out_b, atol=atol, rtol=1e-5))
