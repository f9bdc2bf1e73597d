"""Fixtures every test folder may use: a user's own workload (tests/_workload_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _workload_helpers import write_workload


@pytest.fixture
def user_workload(tmp_path: Path) -> Callable[..., Path]:
    """``user_workload(**overrides)``: a site's model package, image folder and workload
    document under ``tmp_path``; returns the document's path."""

    def make(**overrides: Any) -> Path:
        return write_workload(tmp_path, **overrides)

    return make
