"""``deepedge ekya``: bad input is refused with exit status 2 before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from deepedge.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--streams", "0"], "streams must be >= 1"),
        (["--gpus", "0"], "gpus must be > 0"),
        (["--window-s", "0"], "window_s must be > 0"),
        (["--scheduler", "oracle"], "thief or uniform"),
        (["--scheduler", "uniform", "--uniform-config", "nope"], "is not one of"),
        (["--scheduler", "uniform", "--inference-share", "1.5"], "not in [0, 1]"),
    ],
)
def test_ekya_bad_input_exits_2(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["ekya", *args])
    assert result.exit_code == 2
    assert message in result.output
