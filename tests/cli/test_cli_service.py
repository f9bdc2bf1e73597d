"""``deepedge serve`` says where it listens and writes the context; every client command then
finds the service without options, takes a job's short id, and prints every format of
``-o``: a table for people (ages, short ids, never epoch seconds), a wider one, and the API's
own document as JSON or YAML."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from _support import wait_until
from deepedge.cli import app
from deepedge.cli.context import read_context

runner = CliRunner()
EPOCH_SECONDS = re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b")
DEPLOYMENT = "name: line-1\nlabeller: ground-truth\nwindow_s: 3600\nstream: {window_size: 100}\n"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """``deepedge serve --port 0`` running; its URL, data folder and first stdout lines."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepedge", "serve", "--data-dir", str(data), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("a tenant" in x for x in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        match = re.search(r"listening at (http://127\.0\.0\.1:\d+)", "\n".join(lines))
        assert match, lines
        url = match.group(1)
        assert wait_until(lambda: _healthy(url), 60, interval_s=0.2)
        yield url, data, lines
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _cli(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result


@pytest.mark.slow
def test_serve_announces_itself_and_every_command_prints_every_format(
    served: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, data, lines = served
    text = "\n".join(lines)
    assert f"dashboard: {url}/dashboard" in text
    assert f"export DEEPEDGE_URL={url}" in text
    context = read_context()
    assert context is not None and context.url == url and context.written_by == "deepedge serve"

    # A tenant whose token the context names: nothing more is needed to use the service.
    created = _cli("tenants", "create", "alice", "--data-dir", str(data), "--save-token")
    token_file = data / "tokens" / "alice.token"
    assert token_file.read_text().strip() in created.stdout
    assert 'export DEEPEDGE_TOKEN="$(cat' in created.stdout

    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        "name: counter\nkind: command\nresources: {cpus: 0.5}\nspec:\n  argv: ["
        f"{sys.executable}, -m, deepedge.service.demo_learner, --steps, '3', --step-s, '0.02']\n"
    )
    job = json.loads(_cli("jobs", "submit", str(manifest), "-o", "json").stdout)
    short = job["id"][:8]
    followed = _cli("jobs", "logs", short, "--follow")  # the id a table shows
    assert "done after 3 steps" in followed.stdout
    spec = tmp_path / "line.yaml"
    spec.write_text(DEPLOYMENT)
    _cli("deploy", str(spec))
    token = token_file.read_text().strip()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      trust_env=False) as api:  # fmt: skip
        assert wait_until(
            lambda: api.get("/v1/deployments/line-1").json()["versions"], 120, interval_s=0.2
        )
        documents = {
            ("jobs", "list"): api.get("/v1/jobs").json(),
            ("jobs", "status", short): api.get(f"/v1/jobs/{job['id']}").json(),
            ("deployments", "list"): api.get("/v1/deployments").json(),
            ("models", "versions"): api.get("/v1/models/versions").json(),
        }
    for command, document in documents.items():
        as_json = json.loads(_cli(*command, "-o", "json").stdout)
        as_yaml = yaml.safe_load(_cli(*command, "-o", "yaml").stdout)
        _same_document(as_json, as_yaml)  # (two reads: a window may have begun between)
        _same_document(as_json, document)
        table = _cli(*command).stdout
        wide = _cli(*command, "-o", "wide").stdout
        assert not EPOCH_SECONDS.search(table), table
        assert len(wide.splitlines()[0]) > len(table.splitlines()[0])
        if command[0] == "jobs":
            assert short in table and job["id"] not in table and job["id"] in wide

    # Every other list and show command takes every format too.
    for command in (
        ("jobs", "metrics", short),
        ("deployments", "show", "line-1"),
        ("context", "show"),
        ("deploy", str(spec)),
        ("deployments", "update", "line-1"),
    ):
        for fmt in ("table", "wide", "json", "yaml"):
            out = _cli(*command, "-o", fmt).stdout
            if fmt in ("json", "yaml"):
                assert isinstance(json.loads(out) if fmt == "json" else yaml.safe_load(out), dict)
            else:
                assert not EPOCH_SECONDS.search(out), out
    metrics = _cli("jobs", "metrics", short).stdout
    assert metrics.splitlines()[1].split()[:3] == ["AT", "STEP", "LOSS"]
    shown = _cli("deployments", "show", "line-1").stdout
    assert "canary:" in shown and "canary v-" not in shown and "decisions" in shown
    assert _cli("context", "show").stdout.split("tenant:")[1].split()[0] == "alice"

    for fmt in ("json", "yaml"):
        tenant = _cli("tenants", "create", f"t-{fmt}", "--data-dir", str(data), "-o", fmt).stdout
        parsed = json.loads(tenant) if fmt == "json" else yaml.safe_load(tenant)
        assert parsed["tenant"] == f"t-{fmt}" and parsed["token"].startswith("dpe_")


def _same_document(shown: Any, document: Any) -> None:
    """The CLI's JSON is the API's document (times, and a training version's metrics, may
    have moved on between the reads)."""
    if isinstance(document, dict):
        assert set(shown) == set(document)
        for key, value in document.items():
            if key not in {"updated_at", "window", "last_accuracy", "status", "restarts",
                           "windows_served", "metrics"}:  # fmt: skip
                _same_document(shown[key], value)
    elif isinstance(document, list):
        assert len(shown) == len(document)
        for a, b in zip(shown, document, strict=True):
            _same_document(a, b)
    else:
        assert shown == document
