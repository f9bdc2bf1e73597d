"""``python -m deepedge.bench.update --quick``: a table and the exact RESULT keys.

The recovery and fault measurements are the update path that tests/runtime exercises
(restart, strikes, resume); here the two timing measurements keep the test cheap, and
the argument parsing of the full four-key run is checked without running it.
"""

from __future__ import annotations

import math

import pytest

from _support import result_values
from deepedge.bench.update import main, parse_args

KEYS = ["speedup", "ps_throughput_ratio", "recovered_frac", "fault_acc_delta"]


@pytest.mark.slow
@pytest.mark.ray
def test_quick_benchmark_prints_the_table_and_the_result_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["--quick", "--measure", "speedup", "--measure", "ps"])
    text = capsys.readouterr().out
    assert "EMULATED" in text and "speedup (measured)" in text
    assert "PS throughput ratio" in text
    values = result_values(text)
    assert list(values) == KEYS[:2]  # only what was measured, in the canonical order
    assert all(math.isfinite(v) and v > 0 for v in values.values())


def test_the_default_run_measures_all_four() -> None:
    assert parse_args([]).measure == ("speedup", "ps", "recovery", "fault")
    chosen = parse_args(["--measure", "fault", "--measure", "ps", "--measure", "ps"]).measure
    assert chosen == ("ps", "fault")  # canonical order, each once


@pytest.mark.parametrize("bad", [["--measure", "nothing"], ["--cpus", "x"]])
def test_bad_arguments_exit_with_usage(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(bad)
    assert exc.value.code == 2
