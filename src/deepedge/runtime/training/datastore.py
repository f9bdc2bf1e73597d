"""The data store ``ds``: holds the update's samples and ships each worker its shard.

The store shuffles the ``|M|`` samples once (seeded) and cuts them into contiguous shards of
the plan's sizes ``d_i``, in the plan's worker order, so the shards are disjoint and cover
the data exactly (``sum_i d_i = |M|``). :meth:`DataStore.shard` returns one worker's shard;
called through Ray, its result lives in the object store and is handed to the worker's
``load_shard`` as an object reference, so the bytes go from the store to the worker without
passing through the driver.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from deepedge.core.errors import InvalidInputError


class DataStore:
    """A seeded shuffle of ``(inputs, targets)`` cut into the plan's shards."""

    def __init__(self, inputs: np.ndarray, targets: np.ndarray, seed: int = 0) -> None:
        if len(inputs) != len(targets) or len(inputs) == 0:
            raise InvalidInputError("need equally many (>= 1) inputs and targets", field="data")
        order = np.random.default_rng(seed).permutation(len(inputs))
        self.inputs = np.ascontiguousarray(inputs[order])
        self.targets = np.ascontiguousarray(targets[order])
        self.ranges: dict[str, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self.targets)

    def size(self) -> int:
        return len(self.targets)

    def assign(self, shards: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Cut the data into ``shards`` (worker -> d_i, sum = |M|); returns the ranges."""
        if any(d < 0 for d in shards.values()):
            raise InvalidInputError("shard sizes must be >= 0", field="shards")
        if sum(shards.values()) != len(self.targets):
            raise InvalidInputError(
                f"shards sum to {sum(shards.values())}, the store holds {len(self.targets)}",
                field="shards",
            )
        start = 0
        self.ranges = {}
        for worker_id, d in shards.items():
            if d > 0:
                self.ranges[worker_id] = (start, start + d)
            start += d
        return dict(self.ranges)

    def shard(self, worker_id: str) -> tuple[np.ndarray, np.ndarray]:
        """The ``(inputs, targets)`` of ``worker_id``'s shard (after :meth:`assign`)."""
        if worker_id not in self.ranges:
            raise InvalidInputError(f"no shard assigned to {worker_id}", field="worker_id")
        lo, hi = self.ranges[worker_id]
        return self.inputs[lo:hi], self.targets[lo:hi]
