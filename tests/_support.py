"""Helpers every test folder may use: the benchmarks' RESULT line, and polling."""

from __future__ import annotations

import time
from collections.abc import Callable


def result_values(output: str) -> dict[str, float]:
    """The ``RESULT k=v ...`` line that ends a benchmark's output, as numbers in its order.

    Fails the test (AssertionError) when the output does not end with such a line."""
    lines = output.strip().splitlines()
    assert lines, "no output"
    last = lines[-1]
    assert last.startswith("RESULT "), f"the last line is not a RESULT line: {last!r}"
    values: dict[str, float] = {}
    for item in last.removeprefix("RESULT ").split():
        key, sep, value = item.partition("=")
        assert sep and key and key not in values, f"bad RESULT item {item!r}"
        values[key] = float(value)
    return values


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = 60.0, interval_s: float = 0.05
) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout_s`` passes (False). Generous
    timeouts only: tests assert on what happened, never on how fast."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
