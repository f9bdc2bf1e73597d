"""``python -m deepedge.bench.byo --quick``: the four workloads pass their checks, every
planted mistake the check can see is said, and the local round trip holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support import result_values
from deepedge.bench.byo import main


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_quick_run_catches_every_planted_mistake(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    values = result_values(out)
    assert values == {"workloads": 4, "roundtrip_ok": 1, "silent_failures": 0, "mistakes": 7}
    assert "SILENT" not in out and "torchscript" in out
