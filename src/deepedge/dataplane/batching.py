"""Dynamic batching's bookkeeping, pure: a batch of requests of several versions becomes
one input per version, and each version's output goes back to its requests in order.

``serve.batch`` hands a replica the requests that arrived together (up to
``max_batch_size`` images, or what came within ``batch_wait_ms``); a request may carry
several images, and during a canary the batch holds requests of two versions. A version's
requests run as one forward pass (:func:`by_version`); :func:`scatter` cuts its output back
into each request's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class VersionBatch:
    version: int
    requests: tuple[int, ...]  # positions in the batch, in order
    inputs: np.ndarray  # their images, concatenated along the batch axis
    sizes: tuple[int, ...]  # each request's number of images


def images_in(items: Sequence[tuple[Any, ...]]) -> int:
    """A batch's size in images (``serve.batch``'s ``batch_size_fn``): items are
    ``(version, images, ...)``."""
    return sum(len(item[1]) for item in items)


def by_version(items: Sequence[tuple[int, np.ndarray]]) -> list[VersionBatch]:
    """Group ``(version, images)`` requests by version, in version order."""
    out = []
    for version in sorted({v for v, _ in items}):
        positions = tuple(i for i, (v, _) in enumerate(items) if v == version)
        arrays = [items[i][1] for i in positions]
        out.append(VersionBatch(version, positions, np.concatenate(arrays),
                                tuple(len(a) for a in arrays)))  # fmt: skip
    return out


def scatter(batches: Sequence[VersionBatch], outputs: Sequence[np.ndarray], n: int
            ) -> list[np.ndarray]:  # fmt: skip
    """Each request's rows of its version's output, in the batch's order."""
    answers: list[np.ndarray | None] = [None] * n
    for batch, output in zip(batches, outputs, strict=True):
        if len(output) != sum(batch.sizes):
            raise ValueError(f"version {batch.version} gave {len(output)} rows for "
                             f"{sum(batch.sizes)} images")  # fmt: skip
        start = 0
        for position, size in zip(batch.requests, batch.sizes, strict=True):
            answers[position] = output[start : start + size]
            start += size
    missing = [i for i, a in enumerate(answers) if a is None]
    if missing:
        raise ValueError(f"no output for requests {missing}")
    return [a for a in answers if a is not None]
