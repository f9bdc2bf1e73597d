"""Estimates are not ground truth: a seeded, multiplicative-noise view of any model.

``NoisyModel(inner, noise, seed)`` answers every estimator with the inner model's value
times ``1 + sigma * z``, ``z`` a standard normal clipped to [-3, 3] and ``sigma`` the
estimator's relative error (:class:`EstimatorNoise`; a float means the same sigma for all;
:data:`PAPER_TABLE_I` reproduces the accuracy the paper reports). The noise is a
*fixed* error per question, not fresh randomness per call: ``z`` is a hash of the seed, the
estimator and its inputs, so asking twice gives the same (wrong) answer, as a fitted
regressor would. Planners decide from a ``NoisyModel``; benchmarks score the resulting plans
on the noise-free inner model.

* ``est_compute_time_s``: multiplied by a factor keyed by (device, state): a node's speed
  is misjudged by the same factor at every batch size, so a search over batch sizes cannot
  exploit noise that a real regressor would not have.
* ``est_exec_time_s``: multiplied by a factor keyed by (device, app, cpu and gpu rounded to
  0.01); memory, which the batch size moves, is left out of the key for the same reason.
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
from dataclasses import dataclass
from statistics import NormalDist

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError
from deepedge.perfmodel.protocol import PerformanceModel

_NORMAL = NormalDist()
_Z_CLIP = 3.0
_MAPE_TO_SIGMA = 1.0 / 0.7979  # E|z| = sqrt(2/pi) for a standard normal z


@dataclass(frozen=True, slots=True)
class EstimatorNoise:
    """Relative error (sigma of the multiplicative factor) of each estimator."""

    compute: float = 0.0
    update: float = 0.0
    state_cpu: float = 0.0
    state_gpu: float = 0.0
    state_mem: float = 0.0
    exec: float = 0.0

    @classmethod
    def uniform(cls, sigma: float) -> EstimatorNoise:
        return cls(sigma, sigma, sigma, sigma, sigma, sigma)

    def sigma(self, estimator: str) -> float:
        value: float = getattr(self, estimator)
        return value

    def __post_init__(self) -> None:
        for name, value in (
            ("compute", self.compute),
            ("update", self.update),
            ("state_cpu", self.state_cpu),
            ("state_gpu", self.state_gpu),
            ("state_mem", self.state_mem),
            ("exec", self.exec),
        ):
            if not 0.0 <= value < 1.0 / _Z_CLIP:
                raise InvalidInputError(
                    f"noise sigma for {name} must be in [0, {1.0 / _Z_CLIP:.3f}), got {value}",
                    field="noise",
                )


PAPER_TABLE_I = EstimatorNoise(
    compute=round((1.668 + 5.916) / 2 / 100 * _MAPE_TO_SIGMA, 4),  # Nano, TX2 MAPE
    update=round((9.617 + 7.721) / 2 / 100 * _MAPE_TO_SIGMA, 4),
    state_cpu=round((5.21 + 6.294) / 2 / 100 * _MAPE_TO_SIGMA, 4),
    state_gpu=round((1.498 + 0.509) / 2 / 100 * _MAPE_TO_SIGMA, 4),
    state_mem=round((1.508 + 0.894) / 2 / 100 * _MAPE_TO_SIGMA, 4),
    exec=round((1.73 + 1.48) / 2 / 100 * _MAPE_TO_SIGMA, 4),
)
"""Sigmas matching the mean MAPE of the paper's Table I per estimator (Nano and TX2)."""


def _key(state: NodeState) -> tuple[float, float, float | None]:
    """A node state as plain numbers: cheap to hash and to ``repr`` for the noise seed."""
    return (state.cpu_util, state.mem_util, state.gpu_util)


class NoisyModel:
    """A :class:`PerformanceModel` whose answers carry seeded multiplicative errors."""

    def __init__(
        self, inner: PerformanceModel, noise: EstimatorNoise | float, seed: int = 0
    ) -> None:
        if not isinstance(noise, EstimatorNoise):
            noise = EstimatorNoise.uniform(float(noise))
        self.inner = inner
        self.noise = noise
        self.seed = seed
        self._factors: dict[Hashable, float] = {}

    def factor(self, estimator: str, *key: Hashable) -> float:
        """``1 + sigma * z(seed, estimator, key)``; memoised, deterministic across runs."""
        full_key = (estimator, *key)
        cached = self._factors.get(full_key)
        if cached is not None:
            return cached
        sigma = self.noise.sigma(estimator)
        if sigma == 0.0:
            value = 1.0
        else:
            digest = hashlib.blake2b(repr((self.seed, full_key)).encode(), digest_size=8)
            u = (struct.unpack("<Q", digest.digest())[0] + 0.5) / 2.0**64
            z = max(-_Z_CLIP, min(_Z_CLIP, _NORMAL.inv_cdf(u)))
            value = 1.0 + sigma * z
        self._factors[full_key] = value
        return value

    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float:
        value = self.inner.est_compute_time_s(device, state, batch_size)
        return value * self.factor("compute", device, _key(state))

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float:
        value = self.inner.est_update_time_s(device, state, batch_sizes, ps_state, n_workers)
        return value * self.factor("update", device, _key(state), _key(ps_state), n_workers)

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
        ps_key = _key(ps_state)
        return [
            v * self.factor("update", d, _key(s), ps_key, n_workers)
            for v, d, s in zip(values, devices, states, strict=True)
        ]

    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState:
        true = self.inner.est_state(device, initial, batch_size)

        def noisy(before: float, after: float, name: str) -> float:
            change = (after - before) * self.factor(f"state_{name}", device, _key(initial))
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
        gpu = None if state.gpu_util is None else round(state.gpu_util, 2)
        return value * self.factor("exec", device, app, round(state.cpu_util, 2), gpu)

    def max_batch_size(
        self,
        device: str,
        initial: NodeState,
        mem_capacity_mb: float,
        min_batch: int,
        max_batch: int,
    ) -> int:
        return self.inner.max_batch_size(device, initial, mem_capacity_mb, min_batch, max_batch)
