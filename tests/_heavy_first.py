"""The suite's test files go to its two processes heaviest first (``make test`` runs
``-n 2 --dist loadfile``: each process takes a whole file at a time).

xdist's own order puts the files with the most tests first, so the single-test benchmarks
and the live-site files, up to a minute or more each, came last, and the process that drew
the last of them ran on alone. Longest first ends the run on short files instead. A
file's weight is estimated from its source: a test marked ``slow`` or ``ray`` (a
module-level ``pytestmark`` marks them all) counts ``HEAVY_TEST_S``, any other
``LIGHT_TEST_S``; files of equal weight keep xdist's order.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

HEAVY_TEST_S = 20.0  # a Ray start, a live service or a benchmark: 5-80 s each
LIGHT_TEST_S = 0.2
_MODULE_MARKS = re.compile(r"^pytestmark\s*=(.*)$", re.MULTILINE)
_HEAVY_MARK = re.compile(r"\bmark\.(?:slow|ray)\b")
_HEAVY_DECORATOR = re.compile(r"^\s*@pytest\.mark\.(?:slow|ray)\b", re.MULTILINE)


def file_weight(source: str, n_tests: int) -> float:
    """Estimated seconds of a test file with ``n_tests`` tests and this source."""
    module = _MODULE_MARKS.search(source)
    if module is not None and _HEAVY_MARK.search(module.group(1)):
        heavy = n_tests
    else:
        heavy = min(n_tests, len(_HEAVY_DECORATOR.findall(source)))
    return HEAVY_TEST_S * heavy + LIGHT_TEST_S * (n_tests - heavy)


def _weight(root: Path, scope: str, n_tests: int) -> float:
    try:
        return file_weight((root / scope).read_text(), n_tests)
    except OSError:
        return LIGHT_TEST_S * n_tests


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HeavyFirst(LoadFileScheduling):
        ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:  # the first assignment: the queue holds every file
                self.ordered = True
                root = self.config.rootpath
                files = sorted(
                    self.workqueue.items(), key=lambda kv: -_weight(root, kv[0], len(kv[1]))
                )
                self.workqueue.clear()
                self.workqueue.update(files)
            super()._assign_work_unit(node)

    return HeavyFirst(config, log)
