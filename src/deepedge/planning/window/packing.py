"""Placement of continuous allocations onto whole GPUs (Ekya Sec. 5).

The thief's allocations may span two GPUs. Each job share ``a`` is split into ``floor(a)``
whole GPUs and a remainder quantised to an inverse power of two ``2^-j`` (``j <= max_depth``):

1. round every remainder down to ``2^-j`` (or 0 below ``2^-max_depth``);
2. while capacity is left, promote the remainder that lost the most to the next power
   (``0 -> 2^-max_depth``, ``2^-j -> 2^-(j-1)``) if the total stays ``<= G``;
3. place the pieces first-fit in decreasing size onto ``G`` GPUs of capacity 1.

Pieces whose sizes all divide 1 pack perfectly under first-fit decreasing: whenever their sum
is ``<= G`` every piece finds a GPU, and no GPU is ever filled beyond 1. Fragmentation is
``1 - largest free share on one GPU / total free share`` (0 when nothing is free).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deepedge.core.errors import InfeasibleError
from deepedge.planning.window.documents import GpuPacking, GpuSlot, WindowPlan

_EPS = 1e-9


@dataclass(frozen=True)
class JobShare:
    """A job's continuous allocation in GPUs."""

    stream_id: str
    job: str
    gpus: float


def _floor_pow2(x: float, max_depth: int) -> float:
    if x < 2.0**-max_depth - _EPS:
        return 0.0
    return 2.0 ** math.floor(math.log2(x) + _EPS)


def quantize(shares: list[JobShare], gpus: int, max_depth: int = 4) -> list[tuple[int, float]]:
    """Per job: (whole GPUs, fractional piece in {0} U {2^-j}) with total <= ``gpus``."""
    pieces = []
    for s in shares:
        whole = math.floor(s.gpus + _EPS)
        pieces.append([whole, _floor_pow2(s.gpus - whole, max_depth)])
    if sum(w + f for w, f in pieces) > gpus + _EPS:
        raise InfeasibleError(
            f"allocations of {sum(s.gpus for s in shares):.3g} GPUs exceed the {gpus} GPUs"
        )
    smallest = 2.0**-max_depth
    while True:
        free = gpus - sum(w + f for w, f in pieces)
        best, best_loss = -1, _EPS
        for i, (s, (w, f)) in enumerate(zip(shares, pieces, strict=True)):
            step = smallest if f == 0.0 else f
            loss = s.gpus - w - f
            if f >= 1.0 - _EPS or step > free + _EPS:
                continue
            if loss > best_loss:
                best, best_loss = i, loss
        if best < 0:
            break
        w, f = pieces[best]
        pieces[best][1] = smallest if f == 0.0 else 2.0 * f
        if pieces[best][1] >= 1.0 - _EPS:
            pieces[best] = [w + 1, 0.0]
    return [(int(w), float(f)) for w, f in pieces]


def pack(shares: list[JobShare], gpus: int, max_depth: int = 4) -> GpuPacking:
    """Quantise, then first-fit decreasing onto ``gpus`` GPUs of capacity 1."""
    quantized = quantize(shares, gpus, max_depth)
    items: list[tuple[float, int]] = []
    for idx, (whole, frac) in enumerate(quantized):
        items.extend((1.0, idx) for _ in range(whole))
        if frac > 0.0:
            items.append((frac, idx))
    items.sort(key=lambda item: (-item[0], item[1]))
    load = [0.0] * gpus
    slots: list[GpuSlot] = []
    for size, idx in items:
        gpu = next((g for g in range(gpus) if load[g] + size <= 1.0 + _EPS), None)
        if gpu is None:
            raise InfeasibleError(f"piece {size} of {shares[idx].stream_id} fits on no GPU")
        load[gpu] += size
        slots.append(
            GpuSlot(stream_id=shares[idx].stream_id, job=shares[idx].job, gpu_index=gpu, share=size)
        )
    free = [max(0.0, 1.0 - x) for x in load]
    total_free = sum(free)
    fragmentation = 0.0 if total_free <= _EPS else 1.0 - max(free) / total_free
    return GpuPacking(
        slots=slots,
        gpu_load=load,
        quantization_error_gpus=sum(
            abs(s.gpus - w - f) for s, (w, f) in zip(shares, quantized, strict=True)
        ),
        fragmentation=min(1.0, max(0.0, fragmentation)),
    )


def pack_plan(plan: WindowPlan, max_depth: int = 4) -> GpuPacking | None:
    """Pack a plan's job shares onto its ``G`` GPUs; None when ``G`` is not a whole number.

    A retraining share of a stream that does not retrain is idle and not placed.
    """
    if abs(plan.gpus - round(plan.gpus)) > _EPS:
        return None
    shares: list[JobShare] = []
    for d in plan.streams:
        if d.inference_gpus > _EPS:
            shares.append(JobShare(d.stream_id, "inference", d.inference_gpus))
        if d.retraining_gpus > _EPS and d.retraining_config is not None:
            shares.append(JobShare(d.stream_id, "retraining", d.retraining_gpus))
    return pack(shares, round(plan.gpus), max_depth)
