"""The command line starts without loading the heavy libraries that only some commands use."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "sklearn", "flaml", "pandas", "ray", "scipy", "highspy", "matplotlib")


def test_importing_the_cli_loads_no_heavy_library() -> None:
    code = f"import sys, deepedge.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"loaded at startup: {out.stdout.strip()}"
