"""No source module grows past the hard limit: STYLE.md asks for modules under about 500
lines, and one over :data:`LIMIT_LINES` is split. Every Python module under src/ is counted,
and the dashboard's ES modules beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LIMIT_LINES = 600
PATTERNS = ("*.py", "*.js")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _too_long(root: Path, limit_lines: int = LIMIT_LINES) -> dict[str, int]:
    """Every source file below ``root`` longer than ``limit_lines``, by its path from ``root``,
    with its line count."""
    found = {}
    for pattern in PATTERNS:
        for path in sorted(root.rglob(pattern)):
            if (n := _lines(path)) > limit_lines:
                found[path.relative_to(root).as_posix()] = n
    return found


def test_the_sources_are_read() -> None:
    assert sum(1 for _ in SRC.rglob("*.py")) > 150
    assert any(SRC.rglob("*.js"))


def test_no_source_file_is_over_the_limit() -> None:
    too_long = _too_long(SRC)
    assert too_long == {}, f"split these modules (lines each, limit {LIMIT_LINES}): {too_long}"


@pytest.mark.parametrize(
    ("files", "expected"),
    [({"a.py": 600, "b.py": 40}, {}), ({"a.py": 601, "b.py": 600}, {"a.py": 601}),
     ({"pkg/deep/c.py": 700, "static/d.js": 650, "e.txt": 900},
      {"pkg/deep/c.py": 700, "static/d.js": 650})],
)  # fmt: skip
def test_the_check_finds_exactly_the_long_files(
    tmp_path: Path, files: dict[str, int], expected: dict[str, int]
) -> None:
    for name, n in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n" * n, encoding="utf-8")
    assert _too_long(tmp_path) == expected
