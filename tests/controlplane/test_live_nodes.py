"""Deployments on live nodes, the pure parts: a target resolved against the node
watcher's snapshot, selectors, the service's refusals, and the learner's resources sized
against Ray's object store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from deepedge.cluster.live_nodes import (
    STALE_AFTER_S,
    LiveNode,
    LiveNodes,
    NodeResources,
    fresh_snapshot,
    read_snapshot,
    write_snapshot,
)
from deepedge.cluster.reports import NodeStatus
from deepedge.controlplane.deployment_spec import DeploymentSpec, Target, UpdateResources
from deepedge.controlplane.live_nodes import (
    place_deployment,
    resolve_target,
    selected_now,
    selection_note,
)
from deepedge.controlplane.update_jobs import live_allocation_text, model_update_job
from deepedge.controlplane.update_resources import (
    DATA_COPIES,
    LEARNER_BASE_MB,
    NO_CLUSTER_MEM_MB,
    learner_request,
)
from deepedge.core.errors import DependencyUnavailableError, InvalidInputError
from deepedge.service.learner import ModelUpdateSpec

ADDRESS = "10.0.0.1:6379"


def node(
    node_id: str,
    device: str = "jetson-nano",
    status: NodeStatus = NodeStatus.ALIVE,
    labels: dict[str, str] | None = None,
    store_mb: float = 1200.0,
    memory_mb: float = 8000.0,
    cpus: float = 4.0,
    gpus: float = 0.0,
) -> LiveNode:
    return LiveNode(
        node_id=node_id, status=status, device=device, age_s=0.3, cpu_util=0.2,
        gpu_util=None, mem_util=0.3, mem_total_mb=4096.0, labels=labels or {},
        resources=NodeResources(cpus=cpus, gpus=gpus, memory_mb=memory_mb,
                                object_store_mb=store_mb),
    )  # fmt: skip


SITE = LiveNodes(
    taken_at=1000.0,
    ray_address=ADDRESS,
    nodes=[
        node("head", "raspberry-pi-4", store_mb=2000.0, memory_mb=6000.0),
        node("n1", labels={"zone": "line-1"}),
        node("n2", labels={"zone": "line-2"}),
        node("tx2", "jetson-tx2", labels={"zone": "line-1"}, gpus=1.0),
        node("gone", status=NodeStatus.LOST),
    ],
)


def live_target(**fields: Any) -> Target:
    return Target.model_validate({"live": True, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"nodes": ["n2", "n1"]}, ["n2", "n1"]),  # named: the user's order
        ({}, ["head", "n1", "n2", "tx2"]),  # neither: every alive agent, never the lost one
        ({"selector": {"device_type": "jetson-nano"}}, ["n1", "n2"]),
        ({"selector": {"labels": {"zone": "line-1"}}}, ["n1", "tx2"]),
        ({"selector": {"device_type": "jetson-tx2", "labels": {"zone": "line-1"}}}, ["tx2"]),
    ],
)
def test_a_live_target_resolves_to_the_alive_agents_it_names(
    fields: dict[str, Any], expected: list[str]
) -> None:
    assert resolve_target(live_target(**fields), SITE) == expected


@pytest.mark.parametrize(
    ("fields", "field", "unknown"),
    [
        ({"nodes": ["n1", "nano-7"]}, "target.nodes", ["nano-7"]),
        ({"nodes": ["gone"]}, "target.nodes", ["gone"]),  # known to the registry, but lost
        ({"selector": {"labels": {"zone": "line-9"}}}, "target.selector", []),
    ],
)
def test_a_node_that_is_not_there_is_a_422_naming_it_and_the_alive_ones(
    fields: dict[str, Any], field: str, unknown: list[str]
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        resolve_target(live_target(**fields), SITE)
    error = caught.value
    assert error.http_status == 422 and error.field == field
    assert error.fields["unknown"] == unknown
    assert error.fields["alive"] == ["head", "n1", "n2", "tx2"]
    for name in [*unknown, "head", "n1", "n2", "tx2"]:
        assert name in error.message


def test_named_nodes_must_match_the_selector_they_come_with() -> None:
    target = live_target(nodes=["n2"], selector={"labels": {"zone": "line-1"}})
    with pytest.raises(InvalidInputError, match="n2 do not match"):
        resolve_target(target, SITE)


def test_a_target_is_emulated_unless_live_and_a_selector_needs_live() -> None:
    assert Target().nodes == ["tx2-1", "nano-1", "nano-2", "nano-3"]
    assert live_target().nodes == []  # resolved by the service, not defaulted to the testbed
    with pytest.raises(ValidationError, match="unknown nodes node"):
        Target(nodes=["n1"])
    with pytest.raises(ValidationError, match=r"target\.live: true"):
        Target.model_validate({"selector": {"device_type": "jetson-nano"}})
    with pytest.raises(ValidationError, match="time_scale must be 0"):
        DeploymentSpec.model_validate(
            {"name": "d", "target": {"live": True}, "update": {"time_scale": 0.5}}
        )


def spec(**fields: Any) -> DeploymentSpec:
    return DeploymentSpec.model_validate({"name": "line", **fields})


def test_the_service_resolves_a_live_deployment_into_its_node_ids() -> None:
    placed = place_deployment(
        spec(target={"live": True, "selector": {"device_type": "jetson-nano"}},
             update={"ps_node": "head"}),
        SITE, ray_address=ADDRESS, sandboxed=False,
    )  # fmt: skip
    assert placed.target.nodes == ["n1", "n2"]  # what the data plane reads
    assert placed.target.selector is not None  # kept: the deployment says how it chose
    assert placed.target.follows_selector  # each update takes what it matches then
    named = place_deployment(spec(target={"live": True, "nodes": ["n1"]}), SITE,
                             ray_address=ADDRESS, sandboxed=False)  # fmt: skip
    assert not named.target.follows_selector  # named nodes are the user's, fixed


def test_a_selector_matches_the_alive_agents_of_the_newest_snapshot() -> None:
    nanos = live_target(selector={"device_type": "jetson-nano"})
    later = SITE.model_copy(update={"nodes": [
        *[n for n in SITE.nodes if n.node_id != "n1"],
        node("n1", status=NodeStatus.LOST), node("n4", labels={"zone": "line-2"})]})  # fmt: skip
    assert selected_now(nanos, SITE) == ["n1", "n2"]
    assert selected_now(nanos, later) == ["n2", "n4"]  # n1 lost, n4 joined
    assert selected_now(live_target(), later) == ["head", "n2", "n4", "tx2"]
    assert selection_note(["n1", "n2"], ["n1", "n2"]) == ""
    assert selection_note(["n1", "n2"], ["n2", "n4"]) == (
        " (its selector matches n2, n4 now: n4 joined; n1 no longer matched or not alive)"
    )


@pytest.mark.parametrize(
    ("document", "ray_address", "sandboxed", "why"),
    [
        ({"target": {"live": True}}, None, False, "runs without a Ray cluster"),
        ({}, ADDRESS, False, "emulated testbed"),  # --ray-address alone: no false decision
        ({"target": {"live": True}}, ADDRESS, True, "--trusted-tenants"),
        ({"target": {"live": True}, "update": {"ps_node": "n9"}}, ADDRESS, False, "n9"),
        ({"target": {"live": True}, "update": {"models_dir": "/no/such/dir"}}, ADDRESS, False,
         "/no/such/dir"),
    ],
)  # fmt: skip
def test_a_deployment_the_service_cannot_run_is_refused_saying_why(
    document: dict[str, Any], ray_address: str | None, sandboxed: bool, why: str
) -> None:
    with pytest.raises(InvalidInputError, match=why.replace("-", r"\-")) as caught:
        place_deployment(spec(**document), SITE, ray_address=ray_address, sandboxed=sandboxed)
    assert caught.value.http_status == 422


def test_emulated_deployments_pass_unchanged_without_a_cluster() -> None:
    emulated = spec()
    assert place_deployment(emulated, None, ray_address=None, sandboxed=True) is emulated
    edge = spec(target={"kind": "edge-server"}, update={"policy": "ekya-window"})
    assert place_deployment(edge, None, ray_address=None, sandboxed=True) is edge


def test_the_snapshot_is_read_back_whole_and_judged_by_its_age(tmp_path: Path) -> None:
    assert read_snapshot(tmp_path) is None
    with pytest.raises(DependencyUnavailableError, match="no view of the Ray cluster"):
        fresh_snapshot(None, 1000.0, ADDRESS)
    write_snapshot(tmp_path, SITE)
    back = read_snapshot(tmp_path)
    assert back == SITE
    assert fresh_snapshot(back, SITE.taken_at + 1.0, ADDRESS) is back
    with pytest.raises(DependencyUnavailableError, match="s old") as caught:
        fresh_snapshot(back, SITE.taken_at + STALE_AFTER_S + 1.0, ADDRESS)
    assert caught.value.http_status == 503


@pytest.mark.parametrize(
    ("mem_mb", "data_mb", "expected_mb"),
    [
        (None, 0.0, 2000 + LEARNER_BASE_MB),  # the largest alive store: the head's 2000 MiB
        (None, 10.0, 2000 + LEARNER_BASE_MB + DATA_COPIES * 10),
        (2000 + LEARNER_BASE_MB, 50.0, 2000 + LEARNER_BASE_MB),  # stated: kept
    ],
)
def test_a_learners_memory_covers_the_object_store_it_maps(
    mem_mb: int | None, data_mb: float, expected_mb: int
) -> None:
    request = learner_request(UpdateResources(mem_mb=mem_mb), data_mb, SITE)
    assert request.mem_mb == expected_mb
    assert request.derived is (mem_mb is None) and request.object_store_mb == 2000.0


def test_a_memory_limit_below_the_object_store_is_refused_naming_both_figures() -> None:
    with pytest.raises(InvalidInputError) as caught:
        learner_request(UpdateResources(mem_mb=4096), 0.0, SITE)
    message = caught.value.message
    assert "4096 MiB" in message and "object store of 2000 MiB (node head)" in message
    assert f"at least {2000 + LEARNER_BASE_MB} MiB" in message
    assert caught.value.field == "update.resources.mem_mb"


@pytest.mark.parametrize(
    ("resources", "placeable"),
    [
        ({}, True),  # derived 6096 MiB: n1, n2, tx2 have 8000
        ({"gpus": 1}, True),  # tx2
        ({"gpus": 2}, False),
        ({"cpus": 8}, False),
        ({"mem_mb": 9000}, False),  # more than any node's Ray memory
    ],
)
def test_on_ray_a_request_no_alive_node_can_take_is_refused(
    resources: dict[str, Any], placeable: bool
) -> None:
    stated = UpdateResources.model_validate(resources)
    if placeable:
        assert learner_request(stated, 0.0, SITE, on_ray=True).cpus == stated.cpus
        return
    with pytest.raises(InvalidInputError, match="no alive node of the cluster") as caught:
        learner_request(stated, 0.0, SITE, on_ray=True)
    assert "the most Ray memory is 8000 MiB" in caught.value.message


def test_without_a_cluster_the_default_is_an_address_space_limit_only() -> None:
    assert learner_request(UpdateResources(), 5.0, None).mem_mb == NO_CLUSTER_MEM_MB
    assert learner_request(UpdateResources(mem_mb=3000), 5.0, None).mem_mb == 3000


def test_a_live_deployments_update_job_plans_on_the_cluster() -> None:
    placed = spec(target={"live": True, "nodes": ["n1", "n2"]},
                  update={"ps_node": "head", "models_dir": "/srv/models"})  # fmt: skip
    document = model_update_job(placed, 200, ["n1"])
    job = ModelUpdateSpec.model_validate(document)
    assert job.live_cluster and job.nodes == ["n1"] and job.ps_node == "head"
    assert job.models_root == "/srv/models" and job.train_data is not None
    emulated = model_update_job(spec(), 200)
    assert "live_cluster" not in emulated and emulated["nodes"] == list(spec().target.nodes)


def test_the_decision_says_where_it_ran_and_which_models_planned_it() -> None:
    result = {"live": True, "planned_on": "catalog", "ps_node": "head",
              "workers_ran_on": {"n1": "n1", "n2": "n2"}}  # fmt: skip
    text = live_allocation_text(result)
    assert "n1, n2" in text and "server on head" in text and "catalog models" in text
    assert live_allocation_text({"plan": {}}) == ""
