"""Shared rendering for benchmarks: tables and the closing ``RESULT key=value ...`` line."""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Mapping, Sequence


def format_value(value: float | int | str | bool) -> str:
    """Plain numbers: no units, no percent signs; fractions stay fractions."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return f"{value:.6g}"
    return str(value)


def result_line(values: Mapping[str, float | int | str | bool]) -> str:
    """The last line every benchmark prints: ``RESULT k1=v1 k2=v2 ...`` in the given order."""
    return "RESULT " + " ".join(f"{k}={format_value(v)}" for k, v in values.items())


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain fixed-width text table."""
    cells = [[str(h) for h in headers]] + [
        [format_value(c) if isinstance(c, float | int) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def machine_description() -> str:
    """Cores, CPU model and GPU (or none), for BENCHMARKS.md entries."""
    gpu = "no GPU"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # torch absent or broken: report no GPU
        pass
    return f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, {gpu}"
