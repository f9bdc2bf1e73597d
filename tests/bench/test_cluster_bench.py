"""``python -m deepedge.bench.cluster``: the placement score and the argument parsing.

The benchmark itself starts a four-node Ray cluster (about a minute); the multi-node path it
measures is tested in tests/runtime/test_cluster_multinode.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from deepedge.bench.cluster import main, placed_fraction
from deepedge.learning.convergence import StopReason
from deepedge.planning.sharding.plan import Policy, ShardPlan, WorkerAssignment
from deepedge.runtime.training.update import UpdateResult


def _plan(selected: list[str]) -> ShardPlan:
    return ShardPlan(
        policy=Policy.DEEP_EDGE,
        feasible=True,
        dataset_size=10 * len(selected),
        workers=[WorkerAssignment(id=w, selected=True, shard=10, batch_size=5) for w in selected],
    )


def _result(plans: list[ShardPlan], placements: list[dict[str, str | None]]) -> UpdateResult:
    return UpdateResult(
        weights=np.zeros(1, np.float32),
        best_epoch=1,
        epochs=(),
        accuracies=(0.5,),
        stop_reason=StopReason.MAX_EPOCHS,
        plans=tuple(plans),
        failures=(),
        strikes={},
        excluded=(),
        restarts=len(plans) - 1,
        events=(),
        ps_version=0,
        emulated=False,
        placements=tuple(placements),
    )


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ({"a": "ray-a", "b": "ray-b"}, (1.0, 2, 2)),
        ({"a": "ray-b", "b": "ray-b"}, (0.5, 1, 2)),  # a ran on b's node
        ({"a": None, "b": "ray-b"}, (0.5, 1, 2)),  # unknown placement never counts
    ],
)
def test_placed_fraction_compares_each_launch_with_its_plan(
    where: dict[str, str | None], expected: tuple[float, int, int]
) -> None:
    nodes = {"a": "ray-a", "b": "ray-b"}
    result = _result([_plan(["a", "b"])], [where])
    assert placed_fraction([result], nodes) == expected


def test_placed_fraction_counts_every_launch() -> None:
    nodes = {"a": "ray-a", "b": "ray-b"}
    two = _result([_plan(["a", "b"]), _plan(["b"])], [{"a": "ray-a", "b": "ray-b"}, {"b": "ray-a"}])
    assert placed_fraction([two], nodes) == (2 / 3, 2, 3)


@pytest.mark.parametrize("bad", [["--seed", "x"], ["--nothing"]])
def test_bad_arguments_exit_with_usage(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(bad)
    assert exc.value.code == 2
