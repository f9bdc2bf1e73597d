"""Bad samples: skipped and counted at run time, fatal past a threshold.

A sample that cannot be used (an image that does not decode, a label that is not a class,
a feature that is not a number) is skipped and recorded as a :class:`BadSample` with where
it came from and why, so that one truncated file never aborts an update while a broken data
set never trains silently: a window whose bad share exceeds the workload's
``data.max_bad_fraction`` fails with :class:`InvalidInputError` naming its first bad sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deepedge.core.errors import InvalidInputError


@dataclass(frozen=True)
class BadSample:
    where: str  # a file, or a row of a table
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def check_bad_fraction(
    window: str, total: int, bad: Sequence[BadSample], max_fraction: float
) -> None:
    """Raise when more than ``max_fraction`` of a window's ``total`` samples are bad (or
    when every one is)."""
    if not bad:
        return
    if len(bad) >= total or len(bad) > max_fraction * total:
        raise InvalidInputError(
            f"data: window {window}: {len(bad)} of {total} samples are bad (more than "
            f"data.max_bad_fraction {max_fraction:g}); first: {bad[0]}",
            field="data",
        )


def describe(bad: Sequence[BadSample], limit: int = 5) -> list[str]:
    """The first ``limit`` bad samples as lines (for reports)."""
    return [str(b) for b in bad[:limit]]
