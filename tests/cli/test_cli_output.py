"""What the list and show commands print for people, on canned API answers: short ids in
every table, whole numbers as integers and rates with one decimal, and ``-o wide`` adding
columns (``traffic`` and ``tokens list`` printed the same with it before)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from deepedge.cli import app
from deepedge.cli import serving as serving_cli
from deepedge.cli import tenants as tenants_cli

runner = CliRunner()
NOW = time.time()
TOKENS = {"tokens": [
    {"id": "ab" * 16, "role": "tenant", "label": "first token", "job_id": None,
     "created_at": NOW - 3600, "revoked_at": None},
    {"id": "cd" * 16, "role": "job", "label": "job", "job_id": "ef" * 16,
     "created_at": NOW - 60, "revoked_at": NOW - 30},
]}  # fmt: skip
TRAFFIC = {
    "deployment": "line", "model": "alice.line", "endpoint": "http://127.0.0.1:8000/v2",
    "data_plane": True,
    "traffic": {"span_s": 10.0, "requests": 580, "images": 580, "failed": 0, "rps": 58.0,
                "canary_share": 0.25,
                "latency_ms": {
                    "proxy": {"measured": "at the data plane's ingress", "state": "partial",
                              "reason": "covers 7 of 10 s", "span_s": 10, "covered_s": 7,
                              "failed": 0, "requests": 400, "p50": 14.56, "p95": 30.0,
                              "p99": 41.0, "mean": 16.0},
                    "replica": {"measured": "in the replica", "requests": 580, "p50": 3.456,
                                "p95": 9.0, "p99": 12.0, "mean": 4.0}}},
    "samples": {"stored": 120, "bytes": 2_500_000, "appended": 130, "evicted": 10},
}  # fmt: skip


class Canned:
    """A service that answers GETs from a table (and records the DELETEs)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.deleted: list[str] = []

    def get(self, path: str, **params: Any) -> Any:
        return self.answers[path]

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        self.deleted.append(path)
        return {"id": path.rsplit("/", 1)[-1]}


@pytest.fixture
def canned(monkeypatch: pytest.MonkeyPatch) -> Canned:
    service = Canned({
        "/v1/tokens": TOKENS, "/v1/deployments/line/traffic": TRAFFIC,
        "/v1/deployments": {"deployments": [{"name": "line", "id": "12" * 16}]},
    })  # fmt: skip
    for module in (serving_cli, tenants_cli):
        monkeypatch.setattr(module, "connect", lambda url, token: service)
    return service


def test_tokens_list_shows_short_ids_and_wide_the_whole_ones(canned: Canned) -> None:
    table = runner.invoke(app, ["tokens", "list"]).stdout
    assert "ab" * 4 in table and "ab" * 16 not in table
    wide = runner.invoke(app, ["tokens", "list", "-o", "wide"]).stdout
    assert "ab" * 16 in wide and "FULL ID" in wide and "FULL ID" not in table


def test_a_token_is_revoked_by_the_prefix_a_table_shows(canned: Canned) -> None:
    result = runner.invoke(app, ["tokens", "revoke", "cdcdcdcd"])
    assert result.exit_code == 0, result.output
    assert canned.deleted == ["/v1/tokens/" + "cd" * 16]
    unknown = runner.invoke(app, ["tokens", "revoke", "0000"])
    assert unknown.exit_code == 4


def test_traffic_prints_rates_with_one_decimal_and_wide_adds_rows(canned: Canned) -> None:
    table = runner.invoke(app, ["deployments", "traffic", "line"]).stdout
    assert "requests/s:" in table and "58.0" in table and "58.000" not in table
    rows = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in table.splitlines()}
    assert rows["latency ms at ingress"] == ["p50", "14.6", "p95", "30.0", "p99", "41.0", "(covers",
                                             "7", "of", "10", "s)"]  # fmt: skip
    assert rows["latency ms in replica"] == ["p50", "3.5", "p95", "9.0", "p99", "12.0"]
    wide = runner.invoke(app, ["deployments", "traffic", "line", "-o", "wide"]).stdout
    assert "latency mean ms" in wide and "samples appended" in wide
    assert "at ingress 16.0, in replica 4.0" in wide and "at the data plane's ingress" in wide
    assert "latency mean ms" not in table


def test_traffic_says_when_the_ingress_measured_nothing(canned: Canned) -> None:
    answer = copy.deepcopy(TRAFFIC)
    canned.answers["/v1/deployments/line/traffic"] = answer
    proxy = answer["traffic"]["latency_ms"]["proxy"]
    proxy.update(state="unavailable", reason="no figures from the data plane's ingress",
                 covered_s=0, p50=None, p95=None, p99=None, mean=None)  # fmt: skip
    table = runner.invoke(app, ["deployments", "traffic", "line"]).stdout
    (line,) = [row for row in table.splitlines() if row.startswith("latency ms at ingress")]
    assert line.split(":", 1)[1].strip() == (
        "not measured: no figures from the data plane's ingress"
    )
