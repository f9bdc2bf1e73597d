"""The suite's own layout: pytest imports test files by basename (the
folders are not packages), so two files with one name break collection; and the weights
that hand the heaviest files out first (tests/_heavy_first.py)."""

from collections import Counter
from pathlib import Path

import pytest

from _heavy_first import HEAVY_TEST_S, LIGHT_TEST_S, file_weight


def test_test_file_names_are_unique_across_folders() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []


@pytest.mark.parametrize(
    ("source", "n_tests", "heavy"),
    [
        ("pytestmark = [pytest.mark.ray, pytest.mark.slow]\ndef test_a(): ...\n", 3, 3),
        ("@pytest.mark.slow\ndef test_a(): ...\ndef test_b(): ...\n", 2, 1),
        ("pytestmark = pytest.mark.filterwarnings('x')\n@pytest.mark.ray\ndef test_a(): ...", 4, 1),
        ("def test_a(): ...\n", 5, 0),
    ],
)
def test_a_files_weight_counts_its_slow_and_ray_tests_heavy(
    source: str, n_tests: int, heavy: int
) -> None:
    expected = heavy * HEAVY_TEST_S + (n_tests - heavy) * LIGHT_TEST_S
    assert file_weight(source, n_tests) == pytest.approx(expected)
