"""Estimates are not ground truth: a seeded, multiplicative-noise view of any model.

``NoisyModel(inner, rel_sigma, seed)`` answers every estimator with the inner model's value
times ``1 + rel_sigma * z``, ``z`` a standard normal clipped to [-3, 3]. The noise is a
*fixed* error per question, not fresh randomness per call: ``z`` is a hash of the seed, the
estimator and its inputs, so asking twice gives the same (wrong) answer, as a fitted
regressor would. Planners decide from a ``NoisyModel``; benchmarks score the resulting plans
on the noise-free inner model.

* ``est_compute_time_s``, ``est_exec_time_s``: multiplied by their noise factor.
* ``est_update_time_s``: the factor is keyed by (device, worker state, PS state, |W|), not
  by the whole batch vector, so the vectorised and scalar forms agree.
* ``est_state``: the *change* the training task causes in each of cpu, gpu and mem
  utilisation is multiplied by its own factor (the initial state is measured, the change
  is what a model estimates); results are clipped to [0, 1].
* ``max_batch_size``: delegated unchanged. The training process's memory footprint at a
  batch size is measured exactly before launch; the paper's EstState^mem error is ~1 %.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Hashable, Sequence
from statistics import NormalDist

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.protocol import PerformanceModel

_NORMAL = NormalDist()
_Z_CLIP = 3.0


class NoisyModel:
    """A :class:`PerformanceModel` whose answers carry seeded multiplicative errors."""

    def __init__(self, inner: PerformanceModel, rel_sigma: float, seed: int = 0) -> None:
        if not 0.0 <= rel_sigma < 1.0 / _Z_CLIP:
            raise InvalidInputError(
                f"noise must be in [0, {1.0 / _Z_CLIP:.3f}), got {rel_sigma}", field="noise"
            )
        self.inner = inner
        self.rel_sigma = rel_sigma
        self.seed = seed
        self._factors: dict[Hashable, float] = {}

    def factor(self, *key: Hashable) -> float:
        """``1 + rel_sigma * z(seed, key)``; memoised, deterministic across processes."""
        cached = self._factors.get(key)
        if cached is not None:
            return cached
        if self.rel_sigma == 0.0:
            value = 1.0
        else:
            digest = hashlib.blake2b(repr((self.seed, key)).encode(), digest_size=8).digest()
            u = (struct.unpack("<Q", digest)[0] + 0.5) / 2.0**64
            z = max(-_Z_CLIP, min(_Z_CLIP, _NORMAL.inv_cdf(u)))
            value = 1.0 + self.rel_sigma * z
        self._factors[key] = value
        return value

    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float:
        value = self.inner.est_compute_time_s(device, state, batch_size)
        return value * self.factor("compute", device, state, batch_size)

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float:
        value = self.inner.est_update_time_s(device, state, batch_sizes, ps_state, n_workers)
        return value * self.factor("update", device, state, ps_state, n_workers)

    def est_update_times_s(
        self,
        devices: Sequence[str],
        states: Sequence[NodeState],
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> list[float]:
        """Vectorised :meth:`est_update_time_s`; uses the inner model's vector form if any."""
        vector = getattr(self.inner, "est_update_times_s", None)
        if vector is not None:
            values: list[float] = vector(devices, states, batch_sizes, ps_state, n_workers)
        else:
            values = [
                self.inner.est_update_time_s(d, s, batch_sizes, ps_state, n_workers)
                for d, s in zip(devices, states, strict=True)
            ]
        return [
            v * self.factor("update", d, s, ps_state, n_workers)
            for v, d, s in zip(values, devices, states, strict=True)
        ]

    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState:
        true = self.inner.est_state(device, initial, batch_size)

        def noisy(before: float, after: float, name: str) -> float:
            change = (after - before) * self.factor("state", name, device, initial)
            return min(1.0, max(0.0, before + change))

        gpu = None
        if true.gpu_util is not None:
            gpu = noisy(initial.gpu_util or 0.0, true.gpu_util, "gpu")
        return NodeState(
            cpu_util=noisy(initial.cpu_util, true.cpu_util, "cpu"),
            mem_util=noisy(initial.mem_util, true.mem_util, "mem"),
            gpu_util=gpu,
        )

    def est_exec_time_s(self, device: str, app: str, state: NodeState) -> float:
        value = self.inner.est_exec_time_s(device, app, state)
        return value * self.factor("exec", device, app, state)

    def max_batch_size(
        self,
        device: str,
        initial: NodeState,
        mem_capacity_mb: float,
        min_batch: int,
        max_batch: int,
    ) -> int:
        return self.inner.max_batch_size(device, initial, mem_capacity_mb, min_batch, max_batch)
