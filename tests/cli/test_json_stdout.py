"""Every planning command that prints JSON prints nothing else on stdout.

Run as real processes: a C library (HiGHS) writes to file descriptor 1 directly, which an
in-process runner never sees. Before the fix ``deepedge plan place`` printed HiGHS's
"Running HiGHS ..." banner ahead of the JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

COMMANDS = [
    ["plan", "place", str(EXAMPLES / "placement-tiny.json"), "--method", "milp"],
    ["plan", "place", str(EXAMPLES / "placement-tiny.json"), "--method", "auto"],
    ["plan", "place", str(EXAMPLES / "placement-tiny.json"), "--method", "heuristic"],
    ["plan", "shard", str(EXAMPLES / "cluster.json")],
    ["plan", "shard", str(EXAMPLES / "cluster.json"), "--policy", "oracle"],
    ["plan", "window", str(EXAMPLES / "ekya-window.json")],
    ["simulate", "ekya", str(EXAMPLES / "ekya-illustrative-trace.json")],
]


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2] + a[3:]))
def test_stdout_is_exactly_one_json_document(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deepedge", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().startswith("{"), proc.stdout[:200]
    json.loads(proc.stdout)
