"""The command line's one place for output: ``-o table|wide|json|yaml``, tables, human times.

Every list and show command takes :data:`Output` and hands its document to :func:`emit`
(or :func:`emit_list`): ``json`` and ``yaml`` print the API's document unchanged (times stay
epoch seconds, ids whole), ``table`` renders it for a person (ages and local times, short
ids, ``-`` for nothing) and ``wide`` adds the columns marked ``wide``. Plain-number
formatting (:func:`format_value`) and the fixed-width :func:`table` are shared with the
benchmarks.
"""

from __future__ import annotations

import enum
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

SHORT_ID = 8  # the characters of an id a table shows (any unique prefix is accepted back)


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


Output = Annotated[
    OutputFormat,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="table (for people: ages, short ids), wide (more columns), "
        "json or yaml (the API's document, unchanged)",
    ),
]


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
    """A plain fixed-width text table (benchmarks and ``--explain``)."""
    cells = [[str(h) for h in headers]] + [
        [format_value(c) if isinstance(c, float | int) else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# -- cells ---------------------------------------------------------------------------------

NOTHING = "-"


def text(value: object, digits: int = 3) -> str:
    """One cell: ``-`` for None, yes/no, a whole float as an integer (``8``, not ``8.000``),
    other floats to ``digits`` decimals, lists joined."""
    if value is None or value == "":
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return format_value(value)
        return str(int(value)) if value.is_integer() else f"{value:.{digits}f}"
    if isinstance(value, list | tuple):
        return ", ".join(text(v, digits) for v in value) if value else NOTHING
    return str(value)


def short_id(value: str | None) -> str:
    return value[:SHORT_ID] if value else NOTHING


def version(number: int | None) -> str:
    return NOTHING if number is None else f"v{number}"


def rate(value: float | None, digits: int = 1) -> str:
    """A measured rate or time (requests per second, milliseconds): ``58.0``, ``3.4``."""
    return NOTHING if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def percent(fraction: float | None) -> str:
    return NOTHING if fraction is None else f"{100 * fraction:.1f}%"


def duration(seconds: float | None) -> str:
    """``850ms``, ``42s``, ``3m05s``, ``2h04m``, ``3d02h``."""
    if seconds is None or not math.isfinite(seconds):
        return NOTHING
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def ago(at: float | None, now: float | None = None) -> str:
    """How long ago, as a table's AGE column says it: ``45s``, ``12m``, ``3h``, ``2d``."""
    if at is None:
        return NOTHING
    elapsed = max(0.0, (time.time() if now is None else now) - at)
    for unit_s, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if elapsed >= unit_s:
            return f"{int(elapsed // unit_s)}{unit}"
    return f"{int(elapsed)}s"


def when(at: float | None, now: float | None = None) -> str:
    """A local wall-clock time with its age: ``2026-05-01 14:03:07 (3m ago)``."""
    if at is None:
        return NOTHING
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    return f"{stamp} ({ago(at, now)} ago)"


def clock(at: float | None) -> str:
    """A local wall-clock time alone (a history's lines)."""
    return NOTHING if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


# -- documents -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One table column: its header and the cell of an item (a document's entry)."""

    header: str
    cell: Callable[[Any], object]
    wide: bool = False  # shown with ``-o wide`` only
    right: bool = False  # numbers: right-aligned


def columns_table(items: Sequence[Any], columns: Sequence[Column], wide: bool = False) -> str:
    """A table in the style of ``kubectl get``: upper-case headers, columns three spaces
    apart, nothing drawn; every cell is :func:`text` of its value."""
    shown = [c for c in columns if wide or not c.wide]
    grid = [[c.header.upper() for c in shown]]
    grid += [[text(c.cell(item)) for c in shown] for item in items]
    widths = [max(len(row[i]) for row in grid) for i in range(len(shown))]
    lines = []
    for row in grid:
        cells = [
            value.rjust(width) if column.right else value.ljust(width)
            for value, width, column in zip(row, widths, shown, strict=True)
        ]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, object]]) -> str:
    """``key:  value`` lines, the values aligned (a show command's head)."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)}  {text(v)}" for k, v in pairs)


def section(title: str, body: str, empty: str = "none") -> str:
    """A titled block of a show command, its body indented."""
    inner = body if body.strip() else empty
    return f"{title}:\n" + "\n".join("  " + line for line in inner.splitlines())


def structured(document: Any, fmt: OutputFormat) -> str:
    """The document as JSON or YAML (machine formats)."""
    if hasattr(document, "model_dump"):
        document = document.model_dump(mode="json")
    if fmt is OutputFormat.YAML:
        import yaml

        return str(yaml.safe_dump(document, sort_keys=False, allow_unicode=True)).rstrip()
    return json.dumps(document, indent=2, default=str)


def emit(document: Any, fmt: OutputFormat, human: Callable[[bool], str]) -> None:
    """Print ``document`` in ``fmt``; ``human(wide)`` renders the table forms."""
    if fmt in (OutputFormat.JSON, OutputFormat.YAML):
        sys.stdout.write(structured(document, fmt) + "\n")
        return
    typer.echo(human(fmt is OutputFormat.WIDE))


def emit_list(
    document: Any,
    items: Sequence[Any],
    columns: Sequence[Column],
    fmt: OutputFormat,
    empty: str,
    footer: str | None = None,
) -> None:
    """A list command's output: the table (or ``empty`` when there is nothing, a hint of
    what to do) or the whole document; ``footer`` follows a non-empty table."""

    def human(wide: bool) -> str:
        if not items:
            return empty
        body = columns_table(items, columns, wide)
        return body + ("\n" + footer if footer else "")

    emit(document, fmt, human)


def get(document: Mapping[str, Any] | None, *path: str) -> Any:
    """``document[path[0]][path[1]]...``, None where a step is missing."""
    value: Any = document
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
