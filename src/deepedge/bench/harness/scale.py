"""A benchmark's sizes: one typed frozen dataclass per benchmark (a subclass of
:class:`Scale`), and its two instances, the full run and ``--quick``, held by :class:`Sizes`.

The full sizes give the figures recorded in docs/BENCHMARKS.md; the quick ones run the same
code in seconds to minutes, for the tests and for a smoke run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar


@dataclass(frozen=True)
class Scale:
    """The base of every benchmark's sizes; subclasses add their fields, all frozen."""

    def but(self, **changes: Any) -> Self:
        """These sizes with some fields changed (a command-line override)."""
        return dataclasses.replace(self, **changes)


S = TypeVar("S", bound=Scale)


@dataclass(frozen=True)
class Sizes(Generic[S]):
    """A benchmark's full and quick sizes."""

    full: S
    quick: S

    def pick(self, quick: bool) -> S:
        return self.quick if quick else self.full
