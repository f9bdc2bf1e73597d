"""A user's workload as a site would bring it: a tiny model package and an image folder."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

PACKAGE = textwrap.dedent(
    """
    import numpy as np
    import torch
    from torch import nn


    class Tiny(nn.Module):
        def __init__(self, classes, channels):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2)
            )
            self.head = nn.Linear(16, classes)

        def forward(self, x):
            return self.head(torch.flatten(self.features(x), 1))


    def make(classes=2, channels=3, fail=False):
        if fail:
            raise RuntimeError("the site's factory is broken")
        return Tiny(classes, channels)


    def not_a_model():
        return "a string"


    def redness():
        # the golden labeller: class 0 ("blue") unless red outweighs blue
        def label(images):
            red, blue = images[:, 0].mean(axis=(1, 2)), images[:, 2].mean(axis=(1, 2))
            return (red > blue).astype(np.int64)

        return label
    """
)

CLASSES = ("blue", "red")


def write_images(root: Path, windows: int = 3, per_class: int = 10, size: int = 12) -> None:
    """``root/<window>/<class>/<n>.png``: colour images whose dominant colour is the class;
    later windows are darker and redder, as at dusk (a natural drift of the site's cameras:
    by window 2 a model that learnt "red means red" calls the blue images red too)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for w in range(windows):
        for c, name in enumerate(CLASSES):
            folder = root / f"{w:03d}" / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                img = rng.uniform(0.0, 0.4, size=(size, size, 3))
                img[..., 0 if name == "red" else 2] += 0.5
                img[..., 0] += 0.3 * w
                img *= 1.0 - 0.15 * w
                Image.fromarray((np.clip(img, 0, 1) * 255).astype(np.uint8)).save(
                    folder / f"{c}-{i}.png"
                )


def write_workload(tmp_path: Path, **overrides: Any) -> Path:
    """The package ``mysite`` under ``tmp_path/site``, images under ``tmp_path/images`` and
    the workload document ``tmp_path/workload.json`` (``overrides`` replace its keys)."""
    package = tmp_path / "site" / "mysite"
    if not package.exists():
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "models.py").write_text(PACKAGE)
        write_images(tmp_path / "images")
    doc: dict[str, Any] = {
        "name": "site-cameras",
        "python_path": ["site"],
        "model": {"entry_point": "mysite.models:make", "kwargs": {"classes": 2, "channels": 3}},
        "frozen": {"prefixes": ["features"]},
        "input": {"size": [12, 12], "channels": 3, "mean": [0.5], "std": [0.25]},
        "data": {"kind": "folder", "root": "images"},
        "labeller": {"kind": "labels-present"},
        "seed": 1,
    }
    doc.update(overrides)
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(doc))
    return path
