"""Building the user's model from a workload: entry point or TorchScript, then freezing.

:class:`ModelFactory` is a small picklable callable (Ray ships it to every worker actor):
each call imports the entry point (or loads the TorchScript file), builds the model under
``torch.manual_seed(seed)`` so every process gets the same initial weights, and freezes the
layers the workload names (:func:`freeze`); with ``training.warm_start`` it then loads the
weights trained elsewhere (:func:`deepedge.learning.model_state.load_model_file`), so every
process starts from them. Frozen parameters have ``requires_grad=False``;
the update trains, pushes and checkpoints only the others
(:func:`deepedge.learning.models.get_trainable_flat`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import layers
from deepedge.learning.training import TrainConfig
from deepedge.workload.spec import FrozenLayers, ModelSource, TrainingSpec

# Folders import_entry_point put on sys.path: a package cached from one of them is a
# workload's own, which another workload's package of the same name may replace.
_WORKLOAD_FOLDERS: set[Path] = set()


def import_entry_point(entry_point: str, field_name: str, python_path: Sequence[Path] = ()) -> Any:
    """The object ``package.module:attr.sub`` names, ``python_path`` folders first on
    ``sys.path``; :class:`InvalidInputError` if absent.

    The package is the one ``python_path`` holds: one of the same name that an earlier
    workload's folder gave (another site's ``mysite``, in a process that loads several)
    is forgotten first, or Python would answer from its cached modules with the other's
    code, or fail to find a module only this folder has."""
    for folder in reversed(python_path):
        if str(folder) in sys.path:
            sys.path.remove(str(folder))
        sys.path.insert(0, str(folder))
        _WORKLOAD_FOLDERS.add(folder.resolve())
    module_name, _, attribute = entry_point.partition(":")
    _forget_if_elsewhere(module_name.split(".")[0], python_path)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module raising while it imports
        raise InvalidInputError(
            f"{field_name}: cannot import {module_name!r}: {type(exc).__name__}: {exc}",
            field=field_name,
        ) from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise InvalidInputError(
                f"{field_name}: {module_name!r} has no attribute {attribute!r}", field=field_name
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidInputError(f"{field_name}: {entry_point} is not callable", field=field_name)
    return obj


def _forget_if_elsewhere(package: str, python_path: Sequence[Path]) -> None:
    """Drop ``package`` and its submodules from ``sys.modules`` when the first
    ``python_path`` folder that holds it is not where the cached one came from, and that
    was another workload's folder (never a module the rest of the process imported)."""
    home = next(
        (f for f in python_path if (f / package).is_dir() or (f / f"{package}.py").is_file()),
        None,
    )
    cached = sys.modules.get(package)
    if home is None or cached is None:
        return  # not the workload's own package (torchvision, say), or not imported yet
    origin = getattr(cached, "__file__", None)
    places = [Path(p).resolve() for p in getattr(cached, "__path__", None) or [origin] if p]
    if not places or any(p.is_relative_to(home.resolve()) for p in places):
        return
    if not any(p.parent in _WORKLOAD_FOLDERS for p in places):
        return
    for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def freeze(model: nn.Module, frozen: FrozenLayers) -> list[str]:
    """Set ``requires_grad=False`` on the parameters ``frozen`` names; returns their names.

    Raises :class:`InvalidInputError` when a prefix matches no parameter, ``count`` exceeds
    the layers, or nothing would be left to train.
    """
    names: set[str] = set()
    all_names = [name for name, _ in model.named_parameters()]
    for prefix in frozen.prefixes:
        matched = {n for n in all_names if n == prefix or n.startswith(prefix.rstrip(".") + ".")}
        if not matched:
            raise InvalidInputError(
                f"frozen.prefixes: {prefix!r} matches no parameter "
                f"(names start with {sorted({n.split('.')[0] for n in all_names})})",
                field="frozen.prefixes",
            )
        names |= matched
    found = layers(model)
    if frozen.count > len(found):
        raise InvalidInputError(
            f"frozen.count {frozen.count} > the model's {len(found)} layers", field="frozen.count"
        )
    for layer_name, module in found[: frozen.count]:
        names |= {
            f"{layer_name}.{p}" if layer_name else p
            for p, _ in module.named_parameters(recurse=False)
        }
    if names and names >= set(all_names):
        raise InvalidInputError(
            "frozen: every parameter is frozen, nothing to train", field="frozen"
        )
    for name, param in model.named_parameters():
        param.requires_grad_(name not in names)
    return [n for n in all_names if n in names]


@dataclass(frozen=True)
class ModelFactory:
    """``() -> nn.Module``: the workload's model, seeded and with its frozen layers set."""

    source: ModelSource
    frozen: FrozenLayers
    seed: int = 0
    base_dir: Path = Path()  # what a relative torchscript path is relative to
    python_path: tuple[Path, ...] = ()  # absolute folders
    warm_start: Path | None = None  # absolute: weights loaded after building

    @property
    def torchscript(self) -> bool:
        """Whether the model is a TorchScript model (its versions are TorchScript too)."""
        return self.source.torchscript is not None

    def build_unfrozen(self) -> nn.Module:
        state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)
        try:
            model = self._build()
        finally:
            torch.random.set_rng_state(state)
        if self.warm_start is not None:
            from deepedge.learning.model_state import load_model_file

            try:
                load_model_file(model, self.warm_start)
            except InvalidInputError as exc:
                raise InvalidInputError(
                    f"training.warm_start: {exc.message.removeprefix('weights: ')}",
                    field="training.warm_start",
                ) from exc
        return model

    def _build(self) -> nn.Module:
        if self.source.torchscript is not None:
            path = self.source.torchscript
            path = path if path.is_absolute() else self.base_dir / path
            try:
                model: Any = torch.jit.load(str(path), map_location="cpu")
            except Exception as exc:
                raise InvalidInputError(
                    f"model.torchscript: cannot load {path}: {type(exc).__name__}: {exc}",
                    field="model.torchscript",
                ) from exc
        else:
            assert self.source.entry_point is not None
            factory = import_entry_point(
                self.source.entry_point, "model.entry_point", self.python_path
            )
            try:
                model = factory(**self.source.kwargs)
            except Exception as exc:
                raise InvalidInputError(
                    f"model.entry_point: {self.source.entry_point}(**kwargs) raised "
                    f"{type(exc).__name__}: {exc}",
                    field="model.entry_point",
                ) from exc
        if not isinstance(model, nn.Module):
            raise InvalidInputError(
                f"model: the factory returned {type(model).__name__}, not a torch nn.Module",
                field="model.entry_point",
            )
        if not any(True for _ in model.parameters()):
            raise InvalidInputError("model: the model has no parameters", field="model")
        return model.float()

    def __call__(self) -> nn.Module:
        model = self.build_unfrozen()
        freeze(model, self.frozen)
        return model


def local_training(training: TrainingSpec) -> TrainConfig:
    """The workload's ``training`` section for training in one process (a deployment's
    first version, an edge server's first models): optimizer, learning rate, momentum,
    weight decay, batch size and batches per epoch."""
    return TrainConfig(
        lr=training.learning_rate,
        momentum=training.momentum,
        batch_size=training.batch_size,
        weight_decay=training.weight_decay,
        optimizer=training.optimizer.value,
        max_batches_per_epoch=training.max_batches_per_epoch,
    )
