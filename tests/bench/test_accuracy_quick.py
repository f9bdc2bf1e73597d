"""The accuracy benchmark's quick mode runs a real site end to end: the exact RESULT keys,
and a record whose series agree with what the camera was answered."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from _support import result_values

KEYS = ["acc_ratio", "recovery_s", "recovery_windows_recurring", "wrong_decisions",
        "decisions", "update_p50_s", "update_p95_loaded_s", "labels_frac", "label_budget_drop",
        "gain_vs_no_update", "acc_ratio_resnet", "updates_failed_loaded"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.ray
def test_accuracy_bench_quick(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.bench.accuracy", "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = result_values(done.stdout)
    assert list(figures) == KEYS
    # the runs --quick does not make are nan, never a made-up figure
    for key in ("update_p95_loaded_s", "label_budget_drop", "acc_ratio_resnet"):
        assert math.isnan(figures[key])
    assert 0 < figures["acc_ratio"] <= 1.5
    # labels only ever of sampled requests (half of them, by default); the quick trace is
    # mostly drift, where a window is labelled whole (the full trace's budget is 0.25)
    assert 0.05 < figures["labels_frac"] <= 0.5
    record = json.loads((tmp_path / "accuracy.json").read_text())["main"]
    windows = record["windows"]
    assert len(windows) == 16 and all(w["sent"] == 180 for w in windows)
    assert [w["segment"] for w in windows[::4]] == ["first", "abrupt", "gradual", "recurring"]
    # where v1 answered everything, served is the no-update series (v1 scored offline)
    by_v1 = [w for w in windows if set(w["answered_by"]) == {"1"}]
    assert by_v1 and all(w["deepedge"] == pytest.approx(w["no_update"]) for w in by_v1)
    assert all(sum(w["answered_by"].values()) == 180 - w["failed"] for w in windows)
    # the abrupt drift hurts the first version on the very requests the camera sent
    assert windows[4]["no_update"] < windows[0]["no_update"] - 0.2
    assert (tmp_path / "accuracy-digits.png").stat().st_size > 10_000
    assert (tmp_path / "models" / "main" / "digits-v1.pt").exists()
