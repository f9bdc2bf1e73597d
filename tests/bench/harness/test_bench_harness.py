"""The benchmarks' shared harness: sizes, inference keys, the one-worker plan, the
micro-profiler's grid of configurations and a camera's request."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from deepedge.bench.ekya_microprofile import config_grid
from deepedge.bench.harness.cameras import camera_request
from deepedge.bench.harness.http import InferenceKey, bearer
from deepedge.bench.harness.microprofile import microprofile_grid
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.testbed import one_worker_plan
from deepedge.dataplane.protocol import classifier_signature, parse_infer


@dataclass(frozen=True)
class Toy(Scale):
    seconds: float
    rounds: int


SIZES = Sizes(full=Toy(seconds=20.0, rounds=3), quick=Toy(seconds=5.0, rounds=1))


@pytest.mark.parametrize(("quick", "expected"), [(False, Toy(20.0, 3)), (True, Toy(5.0, 1))])
def test_pick_gives_the_full_or_the_quick_sizes(quick: bool, expected: Toy) -> None:
    assert SIZES.pick(quick) == expected


def test_but_changes_only_the_named_field_and_leaves_the_sizes_alone() -> None:
    changed = SIZES.quick.but(seconds=7.5)
    assert changed == Toy(seconds=7.5, rounds=1)
    assert SIZES.quick == Toy(seconds=5.0, rounds=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.rounds = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("endpoint", "base", "ready"),
    [
        ("http://127.0.0.1:8000/v2/models/site.cams", "http://127.0.0.1:8000",
         "http://127.0.0.1:8000/v2/models/site.cams/ready"),
        ("http://h:1/v2/models/m", "http://h:1", "http://h:1/v2/models/m/ready"),
    ],
)  # fmt: skip
def test_an_inference_key_gives_the_data_plane_and_its_model_routes(
    endpoint: str, base: str, ready: str
) -> None:
    model = endpoint.rsplit("/", 1)[1]
    key = InferenceKey.of({"endpoint": endpoint, "model": model, "key": "k1", "name": "x"})
    assert key.base_url == base
    assert key.route("ready") == ready
    assert key.auth() == bearer("k1") == {"Authorization": "Bearer k1"}


@pytest.mark.parametrize(("samples", "batch"), [(256, 64), (2048, 128), (1, 1)])
def test_the_one_worker_plan_puts_every_sample_on_the_tx2(samples: int, batch: int) -> None:
    plan = one_worker_plan(samples, batch)
    selected = [w for w in plan.workers if w.selected]
    assert [(w.id, w.shard, w.batch_size) for w in selected] == [("tx2-1", samples, batch)]
    assert sum(w.shard for w in plan.workers) == plan.dataset_size == samples
    assert {w.id for w in plan.workers} == {"tx2-1", "nano-1", "nano-2", "nano-3"}


@pytest.mark.parametrize(
    ("quick", "names"),
    [
        (True, ["e5-f100-z0", "e5-f100-z1", "e10-f100-z0", "e10-f100-z1"]),
        (False, [f"e{e}-f{f}-z{z}" for e in (5, 10, 20) for f in (50, 100) for z in (0, 1)]),
    ],
)
def test_the_ekya_grid_is_every_combination_frozen_blocks_fastest(
    quick: bool, names: list[str]
) -> None:
    grid = config_grid(quick, n_classes=7)
    assert [c.name for c in grid] == names
    for config in grid:
        hp = config.hyperparameters
        assert config.name == f"e{hp.epochs}-f{round(hp.data_fraction * 100)}-z{hp.frozen_layers}"
        assert (hp.batch_size, hp.last_layer_neurons) == (32, 7)


def test_the_grid_of_a_workload_follows_its_sizes() -> None:
    grid = microprofile_grid((3,), (0.25, 1.0), (0, 2, 4), n_classes=2)
    assert [c.name for c in grid] == [
        "e3-f25-z0", "e3-f25-z2", "e3-f25-z4", "e3-f100-z0", "e3-f100-z2", "e3-f100-z4",
    ]  # fmt: skip
    assert microprofile_grid((), (1.0,), (0,), 2) == []


def test_a_cameras_request_carries_the_first_image_of_its_window() -> None:
    body, headers, images = camera_request("digits")
    signature = classifier_signature(images.shape[1:], 10)
    request = parse_infer(body, int(headers["Inference-Header-Content-Length"]), signature, 1)
    assert request.batch == 1
    np.testing.assert_array_equal(request.inputs["input"][0], images[0].astype(np.float32))
    assert not np.array_equal(images[0], images[1])  # a real window, not one image repeated
