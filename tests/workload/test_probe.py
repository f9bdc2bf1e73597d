"""The check probes a workload on a real batch: the mistakes of the bring-your-own report
are caught with the field named, or said as a warning with the figures."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _workload_helpers import write_workload
from deepedge.core.errors import InvalidInputError
from deepedge.workload.check import summary
from deepedge.workload.resolve import load_workload

STREAMS = textwrap.dedent(
    """
    import numpy as np
    import torch
    from torch import nn
    from types import SimpleNamespace


    class Stream:
        class_names = ["blue", "red"]
        n_windows = 2

        def __init__(self, scale=1.0, labels="names", data_file=None):
            self.scale, self.labels = scale, labels
            self.data_file = data_file

        def window(self, t):
            rng = np.random.default_rng(t)
            images = rng.uniform(0, 1, (20, 3, 12, 12)).astype(np.float32)
            y = np.arange(20) % 2
            images[y == 1, 0] += 0.5
            names = np.array(["blue", "red"])[y]
            if self.labels == "typos":
                names = np.array(["Blue", "Red"])[y]
            labels = names if self.labels != "ints" else y
            return SimpleNamespace(images=np.clip(images, 0, 1) * self.scale, labels=labels)


    def make_stream(**kwargs):
        if kwargs.get("data_file") is not None:
            np.load(kwargs["data_file"])  # must be found, relative to the workload file
        return Stream(**kwargs)


    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            return self.head(x.mean(dim=(2, 3))).detach()
    """
)


def _stream_workload(tmp_path: Path, **kwargs: Any) -> Path:
    write_workload(tmp_path)
    (tmp_path / "site" / "mysite" / "streams.py").write_text(STREAMS)
    data = {"kind": "stream", "entry_point": "mysite.streams:make_stream", "kwargs": kwargs}
    return write_workload(tmp_path, data=data, frozen={})


def test_string_labels_from_a_stream_map_through_its_class_names(tmp_path: Path) -> None:
    workload = load_workload(_stream_workload(tmp_path))
    window = workload.window(0)
    labels = np.concatenate([window.labels, window.eval_labels])
    assert sorted(set(labels.tolist())) == [0, 1] and not window.skipped


def test_labels_that_name_no_class_fail_the_check(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="label 'Blue' is not a class") as info:
        load_workload(_stream_workload(tmp_path, labels="typos"))
    assert info.value.field == "data"


def test_images_outside_0_1_are_warned_with_the_figures(tmp_path: Path) -> None:
    workload = load_workload(_stream_workload(tmp_path, scale=255.0))
    ranges = [w for w in workload.warnings if "not [0, 1]" in w]
    assert len(ranges) == 2  # the first window and the last one, each with its figures
    assert "window 0's images range over [0.02754, 255]" in ranges[0]


def test_a_normalisation_that_misses_the_data_is_warned(tmp_path: Path) -> None:
    path = write_workload(tmp_path, input={"size": [12, 12], "channels": 3, "mean": [0.5],
                                           "std": [0.001]})  # fmt: skip
    (warning,) = load_workload(path).warnings
    assert warning.startswith("input: normalised with input.mean [0.5] and input.std [0.001]")


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ({"model": {"entry_point": "mysite.models:make", "kwargs": {"classes": 10}}},
         "classes", "the model outputs 10 scores but the data has 2 classes"),
        ({"model": {"entry_point": "mysite.streams:Detached"}}, "model",
         "no gradient reaches the trainable parameters"),
        ({"training": {"warm_start": "missing.pt"}}, "training.warm_start", "cannot read"),
    ],
)  # fmt: skip
def test_mistakes_the_probe_catches(
    tmp_path: Path, override: dict[str, Any], field: str, message: str
) -> None:
    _stream_workload(tmp_path)  # writes the streams module too
    with pytest.raises(InvalidInputError) as info:
        load_workload(write_workload(tmp_path, frozen={}, **override))
    assert info.value.field == field and message in info.value.message


def test_relative_paths_in_kwargs_are_read_from_the_workload_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np.save(tmp_path / "data.npy", np.zeros(1))
    path = _stream_workload(tmp_path, data_file="data.npy")
    monkeypatch.chdir(tmp_path.parent)  # not the workload's folder
    workload = load_workload(path)
    assert workload.spec.data.kwargs["data_file"] == str(tmp_path / "data.npy")  # type: ignore[union-attr]


def test_a_warm_start_loads_a_model_trained_elsewhere(tmp_path: Path) -> None:
    path = write_workload(tmp_path)
    trained = load_workload(path).model_factory()
    with torch.no_grad():
        trained.head.weight.fill_(0.25)
    torch.save(trained.state_dict(), tmp_path / "trained.pt")
    warm = load_workload(write_workload(tmp_path, training={"warm_start": "trained.pt"}))
    model = warm.model_factory()
    assert torch.equal(model.head.weight, trained.head.weight)
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == [
        "features.0.weight",
        "features.0.bias",
    ]


def test_the_check_prints_the_training_defaults(tmp_path: Path) -> None:
    out = summary(str(write_workload(tmp_path, training={"optimizer": "adam"})))
    training = out["training"]
    assert training["optimizer"] == "adam" and training["lr"] == 0.001  # Adam's default
    assert training["max_epochs"] == 30 and training["stop"]["rule"] == "optimus"
    assert training["norm_statistics"] == "recalibrate"
    assert out["input"] == {"kind": "image", "shape": [3, 12, 12]}
    assert out["buffers"] == [] and out["model_format"] == "state-dict"
    json.dumps(out)  # all of it is JSON
