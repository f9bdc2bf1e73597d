"""``deepedge profile`` / ``perfmodels fit`` / ``perfmodels report``: results and one-line
errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.profiling import stressors
from deepedge.profiling.dataset import write_dataset

sys.path.insert(0, str(Path(__file__).parents[1] / "perfmodel"))
from _learned_cases import synthetic_dataset

runner = CliRunner()


def _one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["perfmodels", "fit", "{tmp}/missing"], "does not exist"),
        (["perfmodels", "fit", "{tmp}"], "holds no profile.parquet"),
        (["perfmodels", "report", "{tmp}"], "no learned models"),
        (["profile", "--out", "{tmp}/o", "--format", "xml"], "--format"),
        (["profile", "--out", "{tmp}/o", "--budget-s", "-1"], "--budget-s"),
        (["profile", "--out", "{tmp}/file/sub", "--quick"], "cannot create"),
    ],
)
def test_bad_input_exits_2(tmp_path, args, fragment):
    (tmp_path / "file").write_text("not a directory")
    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2
    assert fragment in _one_line_error(result)


def test_missing_columns_and_too_few_rows(tmp_path):
    dataset = synthetic_dataset(n_configs=3)
    write_dataset(dataset, tmp_path / "few")
    result = runner.invoke(app, ["perfmodels", "fit", str(tmp_path / "few")])
    assert result.exit_code == 2 and "too few rows" in _one_line_error(result)
    write_dataset(dataset, tmp_path / "cols", "csv")
    dataset.frame.drop(columns=["exec_time_s"]).to_csv(tmp_path / "cols" / "profile.csv")
    result = runner.invoke(app, ["perfmodels", "fit", str(tmp_path / "cols")])
    assert result.exit_code == 2 and "exec_time_s" in _one_line_error(result)


def test_stress_ng_missing_exits_2(tmp_path, monkeypatch):
    monkeypatch.setattr(stressors, "stress_ng_path", lambda: None)
    result = runner.invoke(app, ["profile", "--out", str(tmp_path), "--backend", "stress-ng"])
    assert result.exit_code == 2 and "stress-ng is not installed" in _one_line_error(result)


@pytest.fixture(scope="module")
def fitted_dir(tmp_path_factory):
    """A synthetic profile fitted once through ``perfmodels fit`` (shared: fitting is slow)."""
    path = tmp_path_factory.mktemp("profile")
    write_dataset(synthetic_dataset(n_configs=30), path)
    fit = runner.invoke(app, ["perfmodels", "fit", str(path), "--quick"])
    assert fit.exit_code == 0, fit.output
    assert "EstComputeTime" in fit.stdout
    return path


@pytest.mark.slow
def test_fit_then_report(fitted_dir):
    tmp_path = fitted_dir
    assert (tmp_path / "models" / "models.json").is_file()
    report = runner.invoke(app, ["perfmodels", "report", str(tmp_path)])
    assert report.exit_code == 0
    for name in ("EstComputeTime", "EstUpdateTime", "EstState^cpu", "EstState^mem", "EstExecTime"):
        assert name in report.output
    assert "noise floor" in report.output and "importance" in report.output
    as_json = runner.invoke(app, ["perfmodels", "report", str(tmp_path), "-o", "json"])
    assert '"mape_mean"' in as_json.output


@pytest.mark.slow
def test_plan_shard_uses_learned_models(fitted_dir, tmp_path):
    worker = {
        "device": "raspberry-pi-4",
        "state": {"cpu_util": 0.2, "gpu_util": None, "mem_util": 0.3},
        "mem_capacity_mb": 12000.0,
        "min_batch": 4,
        "max_batch": 64,
        "background_apps": [{"name": "sift", "kind": "sift", "deadline_s": 1.0}],
    }
    cluster = {
        "workers": [{"id": "a", **worker}, {"id": "b", **worker}],
        "parameter_server": {"state": {"cpu_util": 0.1, "gpu_util": None, "mem_util": 0.3}},
        "dataset_size": 500,
    }
    doc = tmp_path / "cluster.json"
    doc.write_text(json.dumps(cluster))
    result = runner.invoke(app, ["plan", "shard", str(doc), "--models", str(fitted_dir)])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["feasible"] and sum(w["shard"] for w in plan["workers"]) == 500
    missing = runner.invoke(app, ["plan", "shard", str(doc), "--models", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no learned models" in _one_line_error(missing)


@pytest.mark.slow
@pytest.mark.stress
def test_ctrl_c_keeps_the_rows_and_leaves_no_process(tmp_path):
    import signal
    import subprocess
    import time

    import psutil

    def default_sigint() -> None:
        # a shell starting a background job (``cmd &``) passes SIGINT down as ignored, and
        # Python then installs no Ctrl-C handler: give the child the terminal's default
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "deepedge", "profile", "--out", str(tmp_path), "--quick"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait for the first measured configuration
        if line.startswith("profile: [1/"):
            break
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children  # stressors, SIFT app, parameter server, peers
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "rows kept" in err
    deadline = time.monotonic() + 15
    while any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children):
        assert time.monotonic() < deadline, "a child process survived Ctrl-C"
        time.sleep(0.1)
    from deepedge.profiling.dataset import read_dataset

    kept = read_dataset(tmp_path)
    assert len(kept.frame) >= 1 and kept.provenance.truncated
