"""Plain-text rendering shared by the commands (and the benchmarks): numbers and tables."""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain fixed-width text table."""
    cells = [[str(h) for h in headers]] + [
        [format_value(c) if isinstance(c, float | int) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
