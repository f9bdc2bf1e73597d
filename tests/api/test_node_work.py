"""What runs on each live node, as the service knows it (``api/node_work``), table-driven:
a snapshot's nodes, the tenant's deployments and running jobs in, the work on each node out."""

from __future__ import annotations

from typing import Any

import pytest

from deepedge.api.deployment_schemas import WorkKind
from deepedge.api.node_work import RunningJob, node_work, running_jobs
from deepedge.cluster.live_nodes import LiveNode
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.records import DeploymentId, DeploymentRecord
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.service.manifest import parse_manifest
from deepedge.service.records import JobId, JobRecord, TenantId
from deepedge.service.status import JobStatus

S = NodeStatus
NODES = {"n1": S.ALIVE, "n2": S.ALIVE, "n3": S.LOST, "n4": S.DRAINING, "head": S.ALIVE}


def live(statuses: dict[str, NodeStatus]) -> list[LiveNode]:
    return [LiveNode(node_id=n, status=s, device="jetson-nano", age_s=0.5, cpu_util=0.1,
                     gpu_util=None, mem_util=0.2, mem_total_mb=4096.0)
            for n, s in statuses.items()]  # fmt: skip


def deployment(name: str, target: dict[str, Any], serving: int | None = 1,
               job: str | None = None) -> DeploymentRecord:  # fmt: skip
    edge = target.get("kind") == "edge-server"
    update = {"policy": "ekya-window"} if edge else {}
    spec = DeploymentSpec.model_validate({"name": name, "target": target, "update": update})
    return DeploymentRecord(
        id=DeploymentId(name), tenant_id=TenantId("t"), name=name, spec=spec,
        status=DeploymentStatus.ACTIVE, version=1, created_at=0.0, updated_at=0.0,
        serving_version=serving, canary_version=None, previous_version=None, window=3,
        next_window_at=0.0, last_update_window=None, samples_since_update=0,
        canary_windows_done=0, update_requested=False,
        current_job_id=None if job is None else JobId(job), last_accuracy=None,
    )  # fmt: skip


def update_job(job: str, nodes: list[str] | None, ps: str | None = None,
               node: str | None = None) -> RunningJob:  # fmt: skip
    document: dict[str, Any] = {"live_cluster": True, "train_data": "t.npz", "dataset_size": 9}
    if nodes is not None:
        document["nodes"] = nodes
    if ps is not None:
        document["ps_node"] = ps
    resources = {"node": node} if node else {}
    manifest = {"name": job, "kind": "model-update", "resources": resources,
                "spec": {"document": document}}  # fmt: skip
    return RunningJob(job, parse_manifest(manifest))


def command_job(job: str, node: str | None) -> RunningJob:
    manifest = {"name": job, "kind": "command", "resources": {"node": node} if node else {},
                "spec": {"argv": ["python", "train.py"]}}  # fmt: skip
    return RunningJob(job, parse_manifest(manifest))


def said(work: dict[str, list[Any]]) -> dict[str, list[tuple[str, str | None, str | None]]]:
    return {n: [(w.kind.value, w.deployment, w.job) for w in items]
            for n, items in work.items() if items}  # fmt: skip


LINE = {"live": True, "nodes": ["n3", "n1", "n2"]}
CASES = [
    pytest.param(
        [deployment("line", LINE)], [], False,
        {"n1": [("replicas", "line", None)]},
        id="replicas-on-the-first-alive-node-of-the-target",
    ),
    pytest.param(
        [deployment("line", LINE, serving=None),
         deployment("lost", {"live": True, "nodes": ["n3"]})],
        [], False, {},
        id="nothing-served-yet-or-no-target-node-alive",
    ),
    pytest.param(
        [deployment("emu", {"nodes": ["nano-1"]})], [], False, {},
        id="an-emulated-deployment-is-on-no-live-node",
    ),
    pytest.param(
        [deployment("line", LINE, serving=None, job="j1")],
        [update_job("j1", ["n1", "n3", "n4"], ps="head")], False,
        {"n1": [("update-worker", "line", "j1")], "n4": [("update-worker", "line", "j1")],
         "head": [("parameter-server", "line", "j1")]},
        id="an-updates-workers-and-ps-but-none-on-a-lost-node",
    ),
    pytest.param(
        [], [update_job("j2", None)], False,
        {"n1": [("update-worker", None, "j2")], "n2": [("update-worker", None, "j2")],
         "head": [("update-worker", None, "j2")]},
        id="an-update-without-nodes-takes-every-alive-node",
    ),
    pytest.param(
        [], [command_job("j3", "n2"), command_job("j4", None), command_job("j5", "n3")], True,
        {"n2": [("learner", None, "j3")]},
        id="learners-on-ray-pinned-to-a-node",
    ),
    pytest.param(
        [], [command_job("j3", "n2")], False, {},
        id="local-learners-run-on-no-node",
    ),
    pytest.param(
        [deployment("gate", {"kind": "edge-server", "live": True, "nodes": ["n2"]}, job="j6")],
        [RunningJob("j6", parse_manifest({"name": "w", "kind": "ekya-window",
                                          "spec": {"document": {}}}))], False,
        {"n2": [("replicas", "gate", None), ("window", "gate", "j6")]},
        id="an-ekya-window-on-its-edge-server",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("deployments", "jobs", "on_ray", "expected"), CASES)
def test_what_runs_on_each_node(
    deployments: list[DeploymentRecord], jobs: list[RunningJob], on_ray: bool,
    expected: dict[str, list[tuple[str, str | None, str | None]]],
) -> None:  # fmt: skip
    work = node_work(live(NODES), deployments, jobs, on_ray)
    assert set(work) == set(NODES)  # every node, with or without work
    assert said(work) == expected
    assert not work["n3"]  # a lost node runs nothing of anyone's


def test_a_served_replicas_version_is_named_and_kinds_come_in_order() -> None:
    work = node_work(live({"n1": S.ALIVE}), [deployment("a", {"live": True, "nodes": ["n1"]},
                     serving=4, job="j")], [update_job("j", ["n1"])], False)  # fmt: skip
    kinds = [w.kind for w in work["n1"]]
    assert kinds == [WorkKind.REPLICAS, WorkKind.UPDATE_WORKER]
    assert work["n1"][0].version == 4 and work["n1"][1].version is None


def test_a_job_whose_manifest_no_longer_reads_is_left_out() -> None:
    def record(job: str, manifest: str) -> JobRecord:
        return JobRecord(
            id=JobId(job), tenant_id=TenantId("t"), name=job, kind="command",
            manifest_json=manifest, status=JobStatus.PROCESSING, version=1, created_at=0.0,
            updated_at=0.0, error_code=None, error_message=None, requested_action=None,
            restarts=0, deploy_attempts=0, next_attempt_at=0.0,
        )  # fmt: skip

    good = '{"name": "g", "kind": "command", "spec": {"argv": ["true"]}}'
    jobs = running_jobs([record("a", good), record("b", '{"name": "x"}'), record("c", "{")])
    assert [j.id for j in jobs] == ["a"]
