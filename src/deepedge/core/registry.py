"""Looking a policy up by name in a family's registry (one error for every family)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

from deepedge.core.errors import InvalidInputError

K = TypeVar("K", bound=enum.Enum)
V = TypeVar("V")


def look_up(registry: Mapping[K, V], kind: type[K], name: K | str, what: str, field: str) -> V:
    """``registry[kind(name)]``; a name ``kind`` does not know is bad input naming ``field``
    and listing the registry's names."""
    try:
        return registry[kind(name)]
    except ValueError:
        known = ", ".join(str(k.value) for k in registry)
        raise InvalidInputError(f"unknown {what} {name!r} (known: {known})", field=field) from None
