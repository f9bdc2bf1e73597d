"""The workload document and its checks: good specs build, bad ones name their field."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from _workload_helpers import write_workload
from deepedge.core.errors import InvalidInputError
from deepedge.learning.models import get_trainable_flat, set_trainable_flat
from deepedge.workload.resolve import load_workload
from deepedge.workload.spec import workload_schema

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "schemas" / "workload.schema.json"
MODEL = {"entry_point": "mysite.models:make", "kwargs": {"classes": 2, "channels": 3}}


def test_a_user_workload_builds_with_its_frozen_layers(tmp_path: Path) -> None:
    workload = load_workload(write_workload(tmp_path))
    assert workload.class_names == ("blue", "red")
    assert workload.frozen_names == ("features.0.weight", "features.0.bias")
    assert (workload.parameters, workload.trainable) == (112 + 34, 34)
    model = workload.model_factory()
    assert [n for n, p in model.named_parameters() if p.requires_grad] == [
        "head.weight",
        "head.bias",
    ]
    assert workload.source.n_windows == 3
    window = workload.window(2)
    assert window.images.shape[1:] == (3, 12, 12) and window.eval_images.shape[1:] == (3, 12, 12)
    assert len(window.labels) + len(window.eval_labels) == 20
    assert sorted(set(window.labels.tolist())) == [0, 1]
    # normalised with mean 0.5, std 0.25: values in [-2, 2]
    assert window.images.min() >= -2.0 and window.images.max() <= 2.0
    assert window.images.min() < -1.0


def test_the_factory_is_deterministic_and_crosses_processes(tmp_path: Path) -> None:
    workload = load_workload(write_workload(tmp_path))
    factory = pickle.loads(pickle.dumps(workload.model_factory))
    a, b = workload.model_factory(), factory()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    flat = get_trainable_flat(a)
    assert flat.shape == (34,)
    frozen_before = a.features[0].weight.detach().clone()
    set_trainable_flat(a, flat + 1.0)
    assert torch.equal(a.features[0].weight, frozen_before)
    assert np.allclose(get_trainable_flat(a), flat + 1.0)


def test_frozen_by_count(tmp_path: Path) -> None:
    workload = load_workload(write_workload(tmp_path, frozen={"count": 1}))
    assert workload.frozen_names == ("features.0.weight", "features.0.bias")


def test_a_csv_manifest_makes_time_ordered_windows(tmp_path: Path) -> None:
    write_workload(tmp_path)
    files = sorted((tmp_path / "images").glob("*/*/*.png"))
    rows = ["path,label,timestamp"]
    for i, path in enumerate(reversed(files)):  # out of order on purpose
        rows.append(f"{path.relative_to(tmp_path)},{path.parent.name},{1000 + 60 * (59 - i)}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    data = {"kind": "csv", "manifest": "manifest.csv", "window_s": 600}
    workload = load_workload(write_workload(tmp_path, data=data))
    assert workload.source.n_windows == 6  # 60 images, one a minute, 10-minute windows
    first = workload.source.refs(0)  # type: ignore[attr-defined]
    assert {r.path.parent.parent.name for r in first} == {"000"}


def test_a_labeller_entry_point_labels_unlabelled_data(tmp_path: Path) -> None:
    labeller = {"kind": "entry-point", "entry_point": "mysite.models:redness"}
    workload = load_workload(write_workload(tmp_path, labeller=labeller))
    window = workload.window(0)
    golden = workload.label(window.images, np.full(len(window.labels), -1))
    assert np.mean(golden == window.labels) > 0.9


@pytest.mark.parametrize(
    ("name", "classes", "parameters", "shape"),
    [("digits", 10, 3818, (1, 16, 16)), ("resnet-photos", 8, 11_172_936, (3, 64, 64))],
)
def test_the_bundled_workloads(
    name: str, classes: int, parameters: int, shape: tuple[int, ...]
) -> None:
    workload = load_workload(name)
    assert (workload.n_classes, workload.parameters, workload.trainable) == (
        classes,
        parameters,
        parameters,
    )
    window = workload.window(3)
    assert window.images.shape[1:] == shape and window.eval_images.shape[1:] == shape
    assert window.severity == 0.5  # both drift from window 2 on, over two windows


def test_grey_data_for_a_colour_model_is_converted(tmp_path: Path) -> None:
    write_workload(tmp_path)
    doc = {"data": {"kind": "digits", "window_size": 20}, "classes": None}
    model = {"entry_point": "mysite.models:make", "kwargs": {"classes": 10, "channels": 3}}
    workload = load_workload(write_workload(tmp_path, model=model, **doc))
    assert workload.window(0).images.shape[1:] == (3, 12, 12)


BAD = [
    ({"model": {"entry_point": "nosuchpackage.models:make"}}, "model.entry_point"),
    ({"model": {"entry_point": "mysite.models:nothing"}}, "model.entry_point"),
    (
        {"model": {"entry_point": "mysite.models:make", "kwargs": {"fail": True}}},
        "model.entry_point",
    ),
    ({"model": {"entry_point": "mysite.models:not_a_model"}}, "model.entry_point"),
    ({"model": {"entry_point": "not an entry point"}}, "model.entry_point"),
    ({"model": {"torchscript": "missing.pt"}}, "model.torchscript"),
    ({"model": {}}, "model"),
    ({"frozen": {"prefixes": ["backbone"]}}, "frozen.prefixes"),
    ({"frozen": {"count": 9}}, "frozen.count"),
    ({"frozen": {"prefixes": ["features", "head"]}}, "frozen"),
    ({"input": {"size": [12, 12], "channels": 1}}, "input"),
    ({"input": {"size": [12, 12], "channels": 3, "mean": [0, 0]}}, "input"),
    ({"model": {**MODEL, "kwargs": {"classes": 1, "channels": 3}}}, "classes"),
    ({"data": {"kind": "folder", "root": "nowhere"}}, "data.root"),
    ({"data": {"kind": "csv", "manifest": "nowhere.csv"}}, "data.manifest"),
    ({"data": {"kind": "webcam"}}, "data"),
    (
        {"labeller": {"kind": "entry-point", "entry_point": "mysite.models:gone"}},
        "labeller.entry_point",
    ),
    ({"classes": ["blue"]}, "classes"),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize(("override", "field"), BAD, ids=[f for _, f in BAD])
def test_a_bad_spec_names_its_field(tmp_path: Path, override: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        load_workload(write_workload(tmp_path, **override))
    assert info.value.field == field
    assert info.value.exit_code == 2 and info.value.http_status == 422
    assert info.value.message.startswith(field.split(".")[0])


@pytest.mark.parametrize("broken", [1, 2])
def test_an_unreadable_image_is_skipped_and_named_or_fails_past_the_threshold(
    tmp_path: Path, broken: int
) -> None:
    """A window of 20 images with max_bad_fraction 0.05: one bad image is skipped and
    named in the check's warnings; two fail the read, naming the first."""
    path = write_workload(tmp_path)
    bad = sorted((tmp_path / "images").glob("000/blue/*.png"))[:broken]
    for b in bad:
        b.write_bytes(b"not a png")
    if broken == 1:
        workload = load_workload(path)
        assert any(str(bad[0]) in w for w in workload.warnings)
        window = workload.window(0)
        assert len(window.labels) + len(window.eval_labels) == 19
        assert [s.where for s in window.skipped] == [str(bad[0])]
        return
    with pytest.raises(InvalidInputError, match="2 of 20 samples are bad") as info:
        load_workload(path)
    assert info.value.field == "data" and str(bad[0]) in info.value.message


def test_committed_schema_is_current() -> None:
    assert json.loads(SCHEMA.read_text()) == workload_schema(), (
        "regenerate: deepedge workload schema docs/schemas"
    )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_torchscript_model(tmp_path: Path) -> None:
    write_workload(tmp_path)
    source = load_workload(write_workload(tmp_path)).model_factory.build_unfrozen()
    torch.jit.save(torch.jit.script(source), str(tmp_path / "model.pt"))
    workload = load_workload(write_workload(tmp_path, model={"torchscript": "model.pt"}))
    assert workload.trainable == 34
    model = workload.model_factory()
    assert torch.equal(model.head.weight, source.head.weight)


def test_the_readme_workload_is_a_valid_document() -> None:
    import re

    from deepedge.workload.resolve import parse_workload

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"## Bring your own model and data.*?```json\n(.*?)```", readme, re.S)
    assert block is not None
    spec = parse_workload(json.loads(block.group(1)))
    assert spec.model.entry_point == "mysite.models:make" and spec.input.channels == 3


def _manifest(tmp_path: Path, labelled: bool) -> dict:
    write_workload(tmp_path)
    rows = ["path,label,timestamp"]
    for i, path in enumerate(sorted((tmp_path / "images").glob("*/*/*.png"))):
        label = path.parent.name if labelled else ""
        rows.append(f"{path.relative_to(tmp_path)},{label},2026-11-25T{8 + i // 20:02d}:00:00")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    return {"kind": "csv", "manifest": "manifest.csv", "window_s": 3600}


def test_unlabelled_rows_need_a_labeller(tmp_path: Path) -> None:
    data = _manifest(tmp_path, labelled=False)
    with pytest.raises(InvalidInputError) as info:
        load_workload(write_workload(tmp_path, data=data, classes=["blue", "red"]))
    assert info.value.field == "labeller"
    labeller = {"kind": "entry-point", "entry_point": "mysite.models:redness"}
    doc = {"data": data, "classes": ["blue", "red"], "labeller": labeller}
    workload = load_workload(write_workload(tmp_path, **doc))
    assert workload.source.n_windows == 3  # ISO timestamps, one hour a window
    window = workload.window(0)
    assert (window.labels == -1).all()
    assert set(workload.label(window.images, window.labels).tolist()) == {0, 1}


def test_synthetic_drift_and_a_window_cap_on_a_folder(tmp_path: Path) -> None:
    data = {"kind": "folder", "root": "images", "synthetic_drift": True}
    plain = load_workload(write_workload(tmp_path))
    drifting = load_workload(write_workload(tmp_path, data=data))
    assert [drifting.window(t).severity for t in range(3)] == [0.0, 0.0, 0.0]  # onset after 2
    assert np.abs(drifting.window(0).images - plain.window(0).images).max() > 0  # noise only
    data_late = {**data, "max_window_images": 6}
    capped = load_workload(write_workload(tmp_path, data=data_late))
    window = capped.window(2)
    assert len(window.labels) + len(window.eval_labels) == 6


def test_the_frozen_backbone_example_trains_the_head_only() -> None:
    example = (
        Path(__file__).resolve().parents[2] / "examples" / "workload-resnet-photos-frozen.json"
    )
    workload = load_workload(example)
    assert workload.trainable == 8 * 512 + 8  # the linear head of the ResNet-18
    assert all(name.startswith("features.") for name in workload.frozen_names)
