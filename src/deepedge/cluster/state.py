"""The node state X = (cpu, gpu, mem) of Deep-Edge, Section IV-C1.

Utilisations are fractions in [0, 1]. ``gpu_util`` is ``None`` on a node without a GPU:
absent, never a fake 0 that a learned model could fit to.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class NodeState:
    cpu_util: float  # fraction of all cores busy, 0..1
    mem_util: float  # fraction of memory in use, 0..1
    gpu_util: float | None = None  # fraction of GPU busy, 0..1; None when the node has no GPU

    def __post_init__(self) -> None:
        for name in ("cpu_util", "mem_util", "gpu_util"):
            value = getattr(self, name)
            if value is None:
                continue
            if not 0.0 <= value <= 1.0:
                raise InvalidInputError(f"{name} must be in [0, 1], got {value}", field=name)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_util is not None
