"""``python -m deepedge.bench.workloads --quick``: every part runs, a table and the exact
RESULT keys (toy sizes: the figures themselves are the full run's business)."""

from __future__ import annotations

import math

import pytest

from _support import result_values
from deepedge.bench.workloads import HEADLINE, KEYS, MEASUREMENTS, main


@pytest.mark.slow
@pytest.mark.ray
def test_quick_benchmark_prints_the_table_and_the_result_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    text = "\n".join(out)
    assert "EMULATED" in text and "speedup (measured)" in text
    assert "PS throughput ratio" in text and "frozen backbone: recovered fraction" in text
    assert f"{HEADLINE}: recovered fraction" in text
    assert any("recovered_frac (RESULT) is the" in line and HEADLINE in line for line in out)
    assert "micro-profiler cost fraction" in text
    values = result_values(text)
    assert list(values) == list(KEYS)
    assert all(math.isfinite(v) for v in values.values())
    assert values["ps_ratio_full"] > 0 and values["ps_ratio_frozen"] > 0
    assert 0 <= values["microprofile_mae"] <= 1 and values["microprofile_cost_frac"] > 0
    assert 0 < values["peak_mem_gib"] < 64


def test_the_default_run_measures_everything() -> None:
    assert MEASUREMENTS == ("ps", "speedup", "recovery", "microprofile")


@pytest.mark.parametrize("bad", [["--measure", "nothing"], ["--cpus", "x"]])
def test_bad_arguments_exit_with_usage(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(bad)
    assert exc.value.code == 2
