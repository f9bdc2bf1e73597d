"""The workloads of ``python -m deepedge.bench.byo``, written as a user would bring them.

:func:`write_workloads` lays out, in a folder of its own, what a site's ML engineer would
have, none of it written for deepedge: a Python package of models (``site_models``: a
MobileNet-style BatchNorm CNN, the same with GroupNorm, a plain MLP for tables), a data
module (``camdata``: colour crops of six scikit-image photographs with a camera drift:
darker, noisier, green-tinted), image folders written from it, a TorchScript export of the
BatchNorm CNN, hourly CSV files of scikit-learn's breast-cancer table with drifting columns
and text labels, and one workload document per model:

* ``bn-cnn``: the BatchNorm CNN (entry point) on the photo folders;
* ``torchscript``: its TorchScript export on the same folders;
* ``tabular``: the MLP on the hourly CSV files (text labels, a categorical column);
* ``gn-cnn``: the GroupNorm CNN on the photo stream (labels as class names).

:func:`plant_mistakes` writes the planted mistakes next to them (:class:`Mistake`: what
a user gets wrong, and how the benchmark expects deepedge to say so).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SITE_MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    def _block(c_in, c_out, stride, norm):
        return nn.Sequential(
            nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), norm(c_in), nn.ReLU(),
            nn.Conv2d(c_in, c_out, 1, bias=False), norm(c_out), nn.ReLU(),
        )


    class CamNet(nn.Module):
        # A small MobileNet: every convolution is followed by a normalisation layer.
        def __init__(self, classes=6, width=16, norm="batch"):
            super().__init__()
            layer = nn.BatchNorm2d if norm == "batch" else (lambda c: nn.GroupNorm(4, c))
            self.features = nn.Sequential(
                nn.Conv2d(3, width, 3, 2, 1, bias=False), layer(width), nn.ReLU(),
                _block(width, width, 1, layer), _block(width, 2 * width, 2, layer),
                _block(2 * width, 2 * width, 1, layer), _block(2 * width, 4 * width, 2, layer),
            )
            self.classifier = nn.Sequential(nn.Dropout(0.1), nn.Linear(4 * width, classes))

        def forward(self, x):
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(
                self.features(x), 1), 1))


    def group_cam(classes=6, width=16):
        return CamNet(classes, width, norm="group")


    class TableNet(nn.Module):
        def __init__(self, features, classes, hidden=32):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1),
                                     nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, classes))

        def forward(self, x):
            return self.net(x)
    """
)

CAMDATA = textwrap.dedent(
    """
    import numpy as np
    from types import SimpleNamespace

    PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field",
              "immunohistochemistry")


    def _photos():
        from skimage import data
        return [getattr(data, name)()[..., :3].astype(np.float32) / 255.0 for name in PHOTOS]


    def crops(t, n, size=32, seed=0, drift_from=2):
        # n colour crops of window t (classes in turn) at the camera drift of window t:
        # darker, noisier and green-tinted from window drift_from on.
        from skimage.transform import resize
        rng = np.random.default_rng([seed, t])
        photos = _photos()
        s = float(np.clip((t - drift_from + 1) / 2, 0, 1))
        images, labels = [], []
        for i in range(n):
            c = i % len(photos)
            photo = photos[c]
            side = int(min(photo.shape[:2]) * rng.uniform(0.3, 0.6))
            y = rng.integers(0, photo.shape[0] - side + 1)
            x = rng.integers(0, photo.shape[1] - side + 1)
            img = resize(photo[y:y + side, x:x + side], (size, size), anti_aliasing=True)
            img = img * (1 - 0.5 * s) * rng.uniform(0.85, 1.15)
            img[..., 1] += 0.2 * s
            img += rng.normal(0, 0.02 + 0.08 * s, img.shape)
            images.append(np.clip(img, 0, 1).transpose(2, 0, 1))
            labels.append(PHOTOS[c])
        return np.stack(images).astype(np.float32), np.array(labels)


    class Stream:
        class_names = list(PHOTOS)

        def __init__(self, windows=6, per_window=72, size=32, seed=1, scale=1.0,
                     labels="names"):
            self.n_windows, self.per_window, self.size = windows, per_window, size
            self.seed, self.scale, self.labels = seed, scale, labels

        def window(self, t):
            images, names = crops(t, self.per_window, self.size, self.seed)
            if self.labels == "upper":
                names = np.char.upper(names)
            return SimpleNamespace(images=images * self.scale, labels=names)


    def make_stream(**kwargs):
        return Stream(**kwargs)
    """
)

WINDOWS, PER_WINDOW, IMAGE_SIZE, DRIFT_FROM = 6, 72, 32, 2
TABLE_WINDOWS, TABLE_ONSET = 16, 2
CAMERA = {"size": [IMAGE_SIZE, IMAGE_SIZE], "channels": 3, "mean": [0.5], "std": [0.25]}
SGD = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "max_epochs": 8, "batch_size": 16}


@dataclass(frozen=True)
class Mistake:
    """A planted mistake: the workload document (or None for a service-level one), and
    what deepedge must say: ``check`` (the check fails naming ``field``), ``warning`` (the
    check warns with ``text`` in it), ``update`` (the update says ``text`` at once) or
    ``service`` (the service says ``text``)."""

    name: str
    document: Path | None
    expect: str
    field: str = ""
    text: str = ""


def _write(folder: Path, name: str, doc: dict[str, Any]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def write_photo_folders(root: Path, windows: int, per_window: int, seed: int) -> None:
    """``root/<window>/<class>/<n>.png`` from the user's data module (as a site stores
    its camera frames)."""
    import numpy as np
    from PIL import Image

    camdata = _import(root.parent / "site", "camdata")
    for t in range(windows):
        images, names = camdata.crops(t, per_window, IMAGE_SIZE, seed, DRIFT_FROM)
        for i, (img, name) in enumerate(zip(images, names, strict=True)):
            folder = root / f"{t:03d}" / str(name)
            folder.mkdir(parents=True, exist_ok=True)
            pixels = (np.clip(img.transpose(1, 2, 0), 0, 1) * 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")


def _import(folder: Path, module: str) -> Any:
    import importlib
    import sys

    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(module)


def write_workloads(folder: Path, quick: bool = False, seed: int = 0) -> dict[str, Path]:
    """The user's files and the four workload documents (module docstring)."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "site_models.py").write_text(SITE_MODELS)
    (site / "camdata.py").write_text(CAMDATA)
    windows = 4 if quick else WINDOWS
    per_window = 24 if quick else PER_WINDOW
    write_photo_folders(folder / "photos", windows, per_window, seed)
    import torch

    models = _import(site, "site_models")
    torch.manual_seed(seed)
    torch.jit.save(torch.jit.script(models.CamNet(6)), str(folder / "camnet-scripted.pt"))
    from deepedge.learning.tabular_stream import drifting_cancer_table, write_hourly_csv

    table = drifting_cancer_table(seed=seed, windows=6 if quick else TABLE_WINDOWS,
                                  rows_per_window=120, onset_window=TABLE_ONSET)  # fmt: skip
    write_hourly_csv(table, folder / "table")
    common = {"python_path": ["site"], "seed": seed}
    bn = {**common, "name": "bn-cnn", "model": {"entry_point": "site_models:CamNet",
          "kwargs": {"classes": 6}}, "input": CAMERA,
          "data": {"kind": "folder", "root": "photos"}, "training": SGD}  # fmt: skip
    scripted = {**bn, "name": "torchscript", "model": {"torchscript": "camnet-scripted.pt"}}
    tabular = {**common, "name": "tabular",
               "model": {"entry_point": "site_models:TableNet",
                         "kwargs": {"features": 34, "classes": 2}},
               "data": {"kind": "table", "path": "table", "label": "diagnosis",
                        "timestamp": "time", "fit_windows": 2},
               "classes": ["benign", "malignant"],
               "training": {"optimizer": "adam", "lr": 0.01, "max_epochs": 12}}  # fmt: skip
    stream = {
        "kind": "stream",
        "entry_point": "camdata:make_stream",
        "kwargs": {"windows": windows, "per_window": per_window, "seed": seed + 1},
    }
    gn = {**common, "name": "gn-cnn", "model": {"entry_point": "site_models:group_cam",
          "kwargs": {"classes": 6}}, "input": CAMERA, "data": stream, "training": SGD}  # fmt: skip
    documents: list[dict[str, Any]] = [bn, scripted, tabular, gn]
    return {str(doc["name"]): _write(folder, str(doc["name"]), doc) for doc in documents}


def plant_mistakes(folder: Path, workloads: dict[str, Path]) -> list[Mistake]:
    """The planted mistakes (module docstring): at least eight, each with what deepedge
    must say about it."""
    docs = {name: json.loads(path.read_text()) for name, path in workloads.items()}
    bn, tab, gn = docs["bn-cnn"], docs["tabular"], docs["gn-cnn"]
    out: list[Mistake] = []

    def plant(name: str, doc: dict[str, Any], expect: str, field: str = "", text: str = "") -> None:
        out.append(Mistake(name, _write(folder, f"mistake-{name}", doc), expect, field, text))

    plant("wrong-outputs", {**bn, "model": {**bn["model"], "kwargs": {"classes": 10}}},
          "check", "classes")  # fmt: skip
    upper = {**gn["data"], "kwargs": {**gn["data"]["kwargs"], "labels": "upper"}}
    plant("string-labels", {**gn, "data": upper}, "check", "data")
    broken = folder / "photos-broken"
    if not broken.exists():
        shutil.copytree(folder / "photos", broken)
    first = sorted((broken / "000").glob("*/*.png"))[0]
    first.write_bytes(first.read_bytes()[:60])  # a truncated PNG
    plant("corrupt-image", {**bn, "data": {"kind": "folder", "root": "photos-broken"}},
          "warning", text=str(first))  # fmt: skip
    scaled = {**gn["data"], "kwargs": {**gn["data"]["kwargs"], "scale": 255.0}}
    plant("bad-range", {**gn, "data": scaled}, "warning", text="not [0, 1]")
    plant("missing-column", {**tab, "data": {**tab["data"], "label": "outcome"}}, "check",
          "data.label")  # fmt: skip
    plant("bad-entry-point", {**bn, "model": {"entry_point": "site_models:CamNett"}}, "check",
          "model.entry_point")  # fmt: skip
    torch_state = folder / "camnet-state.pt"
    _save_state_dict(folder, torch_state)
    plant("torchscript-is-a-state-dict", {**bn, "model": {"torchscript": torch_state.name}},
          "check", "model.torchscript")  # fmt: skip
    diverging = {**tab["training"], "optimizer": "sgd", "lr": 10.0, "momentum": 0.99}
    plant("diverging-model", {**tab, "training": diverging}, "update", text="")
    out.append(Mistake("duplicate-deployment", None, "service", text="exists with another spec"))
    return out


def _save_state_dict(folder: Path, path: Path) -> None:
    import torch

    models = _import(folder / "site", "site_models")
    torch.save(models.CamNet(6).state_dict(), path)
