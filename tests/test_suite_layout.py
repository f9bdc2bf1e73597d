"""The suite's own layout: pytest imports test files by basename (the
folders are not packages), so two files with one name break collection."""

from collections import Counter
from pathlib import Path


def test_test_file_names_are_unique_across_folders() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
