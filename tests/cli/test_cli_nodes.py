"""``deepedge nodes``: the service's view of the site's nodes (``GET /v1/nodes``) for people,
``-o wide`` naming each node's Ray node and what runs on it, ``-o json`` the API's document
unchanged; ``--address`` still reads a cluster's registry."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from deepedge.api.app import create_app
from deepedge.cli import app
from deepedge.cli import nodes as nodes_cli
from deepedge.cluster.live_nodes import LiveNode, LiveNodes, NodeResources, write_snapshot
from deepedge.cluster.reports import NodeStatus
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation
from deepedge.service.store import JobStore

runner = CliRunner()
RAY_A, RAY_B = "a1b2c3d4e5f6" + "0" * 44, "ffeeddccbbaa" + "1" * 44
JOB = "3f23ad6c" + "9" * 24
LOST_AT = time.time() - 75.0
WORK = [
    {"kind": "replicas", "deployment": "line", "job": None, "version": 3},
    {"kind": "update-worker", "deployment": "line", "job": JOB, "version": None},
]


def node(name: str, state: str, ray: str, address: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "device": "jetson-nano", "role": "worker", "state": state,
            "emulated_utilisation": {}, "deployments": ["line"], "canary": [], "jobs": [],
            "allocations": [], "source": "live",
            "utilisation": {"cpu": 0.43, "gpu": None, "mem": 0.5}, "age_s": 0.4, "apps": [],
            "labels": {}, "ray_node_id": ray, "resources": {"cpus": 4.0},
            "hostname": f"host-{name}", "address": address, "lost_at": None, "work": [],
            **more}  # fmt: skip


PAGE = {
    "nodes": [node("nano-1", "up", RAY_A, "10.0.0.2", jobs=[JOB], work=WORK),
              node("nano-2", "lost", RAY_B, "10.0.0.3", lost_at=LOST_AT)],
    "cluster": "10.0.0.1:6379", "taken_at": time.time(), "stale": False,
}  # fmt: skip


class Canned:
    def __init__(self, page: dict[str, Any]) -> None:
        self.page, self.asked = page, []  # type: ignore[var-annotated]

    def get(self, path: str, **params: Any) -> Any:
        self.asked.append(path)
        return self.page


@pytest.fixture
def canned(monkeypatch: pytest.MonkeyPatch) -> Canned:
    # the lost node was lost 75 s before the test runs (not before the module was imported:
    # a whole suite can lie between the two)
    lost_at = time.time() - 75.0
    page = {**PAGE, "nodes": [PAGE["nodes"][0], {**PAGE["nodes"][1], "lost_at": lost_at}],
            "taken_at": time.time()}  # fmt: skip
    service = Canned(page)
    monkeypatch.setattr(nodes_cli, "connect", lambda url, token: service)
    return service


def rows(out: str) -> dict[str, str]:
    return {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}


def test_the_table_asks_the_service_and_greys_nothing_into_figures(canned: Canned) -> None:
    result = runner.invoke(app, ["nodes"], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 0, result.output
    assert canned.asked == ["/v1/nodes"]
    table = rows(result.stdout)
    assert "43.0%" in table["nano-1"] and JOB[:8] in table["nano-1"] and JOB not in result.stdout
    assert "%" not in table["nano-2"]  # a lost node's last load is not shown as its load
    assert "RAY NODE" not in result.stdout and "10.0.0.1:6379" in result.stdout


def test_wide_names_each_ray_node_and_what_runs_on_it(canned: Canned) -> None:
    result = runner.invoke(app, ["nodes", "-o", "wide"], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert {"RAY", "ADDRESS", "HOST", "RUNS", "LOST"} <= set(header)
    table = rows(result.stdout)
    up, lost = table["nano-1"], table["nano-2"]
    assert RAY_A[:12] in up and RAY_A[:13] not in up and "10.0.0.2" in up and "host-nano-1" in up
    assert f"line replicas v3; worker of {JOB[:8]} (line)" in up
    lost_at = canned.page["nodes"][1]["lost_at"]
    stamp = time.strftime("%H:%M:%S", time.localtime(lost_at))
    assert stamp in lost and "(1m ago)" in lost and RAY_B[:12] in lost


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_are_the_apis_document(canned: Canned, fmt: str) -> None:
    import yaml

    result = runner.invoke(app, ["nodes", "-o", fmt], env={"RAY_ADDRESS": ""})
    assert result.exit_code == 0, result.output
    assert (json.loads if fmt == "json" else yaml.safe_load)(result.stdout) == canned.page


@pytest.fixture
def live_service(tmp_path: Path) -> Iterator[TestClient]:
    settings = ServiceSettings(data_dir=tmp_path, tick_s=0.05, ray_address="10.0.0.1:6379",
                               isolation=Isolation.TRUSTED)  # fmt: skip
    store = JobStore(settings.url)
    store.migrate()
    store.create_tenant("alice", "token-alice")
    store.dispose()
    now = time.time()
    write_snapshot(tmp_path, LiveNodes(taken_at=now, ray_address="10.0.0.1:6379", nodes=[
        LiveNode(node_id=n, status=s, device="jetson-nano", age_s=0.5, cpu_util=0.2,
                 gpu_util=None, mem_util=0.3, mem_total_mb=4096.0, ray_node_id=r,
                 hostname=f"host-{n}", address=a,
                 lost_at=now - 9.0 if s is NodeStatus.LOST else None,
                 resources=NodeResources(cpus=4.0, object_store_mb=700.0))
        for n, s, r, a in (("nano-1", NodeStatus.ALIVE, RAY_A, "10.0.0.2"),
                           ("nano-2", NodeStatus.LOST, RAY_B, "10.0.0.3"))]))  # fmt: skip
    with TestClient(create_app(settings, run_manager=False), base_url="http://localhost") as client:
        yield client


def test_the_service_answer_is_printed_unchanged_and_reads_in_wide(
    live_service: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's own document (no hand-made one): ``-o json`` is it, byte for byte as JSON."""
    document = live_service.get("/v1/nodes", headers={"Authorization": "Bearer token-alice"}).json()
    monkeypatch.setattr(nodes_cli, "connect", lambda url, token: Canned(document))
    printed = runner.invoke(app, ["nodes", "-o", "json"], env={"RAY_ADDRESS": ""})
    assert json.loads(printed.stdout) == document
    wide = rows(runner.invoke(app, ["nodes", "-o", "wide"], env={"RAY_ADDRESS": ""}).stdout)
    assert RAY_A[:12] in wide["nano-1"] and "10.0.0.2" in wide["nano-1"]
    lost_at = next(n["lost_at"] for n in document["nodes"] if n["name"] == "nano-2")
    stamp = time.strftime("%H:%M:%S", time.localtime(lost_at))
    assert "lost" in wide["nano-2"] and stamp in wide["nano-2"]


def test_without_a_service_it_says_so_in_one_line(tmp_path: Path) -> None:
    env = {"RAY_ADDRESS": "", "DEEPEDGE_CONTEXT": str(tmp_path / "none.json"),
           "DEEPEDGE_URL": "http://127.0.0.1:9", "DEEPEDGE_TOKEN": "t"}  # fmt: skip
    result = runner.invoke(app, ["nodes"], env=env)
    assert result.exit_code == 8, result.output
    assert "cannot reach http://127.0.0.1:9" in result.output and "Traceback" not in result.output
