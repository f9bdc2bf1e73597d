"""``deepedge demo`` rejects bad input with one line and exit status 2, before starting Ray."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image-folder", "does-not-exist"], "is not a folder"),
        (["--windows", "1"], "--windows"),
    ],
)
def test_bad_demo_input(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
