"""The benchmarks' shared harness: sizes, inference keys and the one-worker plan (pure)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from deepedge.bench.harness.http import InferenceKey, bearer
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.testbed import one_worker_plan


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
