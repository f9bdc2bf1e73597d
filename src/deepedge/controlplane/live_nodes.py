"""The live nodes of the service's Ray cluster as a deployment sees them: which of them it
names, selects, or trains and serves on (pure; the document itself, written by the node
watcher, is :mod:`deepedge.cluster.live_nodes`).

* :func:`resolve_target`: a live target's node ids. Named nodes must all be alive agents
  (else :class:`~deepedge.core.errors.InvalidInputError` naming the unknown ids and the
  alive ones: a 422, never a silent fallback to fewer nodes); a selector takes every
  alive agent whose device type and Ray labels match, and must match one at least; with
  neither, every alive agent.
* :func:`selected_now`: the alive agents a target's selector matches now: a target given by
  selector is resolved at creation and again at each update (``target.follows_selector``).
* :func:`edge_server_capacity`: what a live edge server's Ekya windows share, its GPUs,
  else its CPU cores (Ray's totals); a live edge-server target names exactly one agent.
"""

from __future__ import annotations

from pathlib import Path

from deepedge.cluster.live_nodes import LiveNode, LiveNodes
from deepedge.controlplane.deployment_spec import DeploymentSpec, NodeSelector, Target, TargetKind
from deepedge.controlplane.update_resources import learner_request
from deepedge.core.errors import InvalidInputError

MAX_EDGE_SERVER_GPUS = 64.0  # an edge server's window plans over this many at most


def matches(selector: NodeSelector, node: LiveNode) -> bool:
    if selector.device_type is not None and node.device != selector.device_type.value:
        return False
    return all(node.labels.get(k) == v for k, v in selector.labels.items())


def _describe(nodes: list[LiveNode]) -> str:
    if not nodes:
        return "no alive agent"
    return ", ".join(f"{n.node_id} ({n.device})" for n in nodes)


def resolve_target(target: Target, snapshot: LiveNodes) -> list[str]:
    """The node ids a live ``target`` names now (module docstring); sorted for a
    selector or all, in the target's own order for named nodes."""
    alive = sorted(snapshot.alive(), key=lambda n: n.node_id)
    alive_ids = {n.node_id for n in alive}
    if target.nodes:
        unknown = [n for n in target.nodes if n not in alive_ids]
        if unknown:
            raise InvalidInputError(
                f"target.nodes: {', '.join(unknown)} is not an alive agent of the cluster "
                f"at {snapshot.ray_address}; alive: {_describe(alive)}",
                field="target.nodes",
                unknown=unknown,
                alive=sorted(alive_ids),
            )
        chosen = list(target.nodes)
        if target.selector is not None:
            misfits = [n.node_id for n in alive if n.node_id in chosen
                       and not matches(target.selector, n)]  # fmt: skip
            if misfits:
                raise InvalidInputError(
                    f"target.nodes: {', '.join(misfits)} do not match target.selector",
                    field="target.selector",
                )
        return chosen
    chosen = [n.node_id for n in alive if target.selector is None or matches(target.selector, n)]
    if not chosen:
        what = "target.selector matches" if target.selector is not None else "there is"
        raise InvalidInputError(
            f"{what} no alive agent of the cluster at {snapshot.ray_address}; alive: "
            f"{_describe(alive)}",
            field="target.selector" if target.selector is not None else "target.nodes",
            unknown=[],
            alive=sorted(alive_ids),
        )
    return chosen


def selected_now(target: Target, snapshot: LiveNodes) -> list[str]:
    """The alive agents a live target's selector (else every agent) matches in
    ``snapshot``, sorted: what an update of a target that follows its selector takes."""
    return sorted(n.node_id for n in snapshot.alive()
                  if target.selector is None or matches(target.selector, n))  # fmt: skip


def selection_note(before: list[str], now: list[str]) -> str:
    """What changed between the agents a selector matched (``before``) and matches
    ``now``, for an update's event ("" when nothing did)."""
    joined = [n for n in now if n not in before]
    left = [n for n in before if n not in now]
    if not (joined or left):
        return ""
    said = ([f"{', '.join(joined)} joined"] if joined else []) + (
        [f"{', '.join(left)} no longer matched or not alive"] if left else []
    )
    return f" (its selector matches {', '.join(now)} now: {'; '.join(said)})"


def edge_server_capacity(node: LiveNode) -> float:
    """The ``G`` of a live edge server's windows: its GPUs when it has any (the shares are
    GPU fractions), else its CPU cores (the shares are CPU threads); at most
    :data:`MAX_EDGE_SERVER_GPUS`, what a window plans over."""
    r = node.resources
    return min(r.gpus if r.gpus > 0 else r.cpus, MAX_EDGE_SERVER_GPUS)


def _one_edge_server(target: Target, nodes: list[str], snapshot: LiveNodes) -> LiveNode:
    """The one agent a live edge-server target resolved to (422 when a selector matched
    several, or the node reports no CPU or GPU to share)."""
    if len(nodes) != 1:
        raise InvalidInputError(
            f"target.selector: an edge server is one agent; the selector matches "
            f"{', '.join(nodes)} (name one in target.nodes, or narrow the selector)",
            field="target.selector",
            matched=nodes,
        )
    node = snapshot.node(nodes[0])
    assert node is not None, "resolve_target returns alive agents of the snapshot"
    if edge_server_capacity(node) <= 0:
        raise InvalidInputError(
            f"target.nodes: {node.node_id} reports no CPU or GPU to Ray; an edge server's "
            "windows share its GPUs, or its cores",
            field="target.nodes",
        )
    return node


def check_ps_node(ps_node: str | None, snapshot: LiveNodes) -> None:
    """A named parameter-server node must be an alive agent (422 otherwise)."""
    if ps_node is None:
        return
    alive = sorted(snapshot.alive(), key=lambda n: n.node_id)
    if ps_node not in {n.node_id for n in alive}:
        raise InvalidInputError(
            f"update.ps_node: {ps_node} is not an alive agent of the cluster at "
            f"{snapshot.ray_address}; alive: {_describe(alive)}",
            field="update.ps_node",
            unknown=[ps_node],
            alive=[n.node_id for n in alive],
        )


def place_deployment(
    spec: DeploymentSpec,
    snapshot: LiveNodes | None,
    *,
    ray_address: str | None,
    sandboxed: bool,
    learners_on_ray: bool = False,
) -> DeploymentSpec:
    """``spec`` as a service at ``ray_address`` (None: no cluster) takes it: a live target
    resolved into its node ids (``target.nodes``), its parameter-server node and learner
    resources checked against ``snapshot`` (already :func:`fresh_snapshot`); a live edge
    server's ``target.gpus`` set to its node's :func:`edge_server_capacity`. Raises
    InvalidInputError (422) naming why a deployment cannot run here: on a cluster every
    target is live (an emulated edge server or testbed would plan on nodes that are not
    there)."""
    target = spec.target
    if ray_address is None:
        if target.live:
            raise InvalidInputError(
                "target.live: this service runs without a Ray cluster (start it with "
                "deepedge serve --ray-address HEAD:PORT)",
                field="target.live",
            )
        return spec
    edge = target.kind is TargetKind.EDGE_SERVER
    if not target.live and edge:
        raise InvalidInputError(
            f"target.live: this service runs on the Ray cluster at {ray_address}: an edge "
            "server is one of its agents (target.live: true, with target.nodes: [NODE_ID] or "
            f"a target.selector); the emulated {', '.join(target.nodes)} is not there",
            field="target.live",
        )
    if not target.live:
        raise InvalidInputError(
            f"target.live: this service runs on the Ray cluster at {ray_address}: a "
            "deployment's nodes are its agents (target.live: true, with target.nodes or "
            "target.selector); the emulated testbed's would plan on nodes that are not there",
            field="target.live",
        )
    if sandboxed:
        raise InvalidInputError(
            "target.live: a live deployment's update joins the service's Ray cluster, which "
            "a sandboxed learner cannot reach (no network in the sandbox); the operator "
            "starts the service with --trusted-tenants for such tenants",
            field="target.live",
        )
    assert snapshot is not None, "a service on a cluster reads its snapshot first"
    nodes = resolve_target(target, snapshot)
    check_ps_node(spec.update.ps_node, snapshot)
    if spec.update.models_dir is not None and not Path(spec.update.models_dir).is_dir():
        raise InvalidInputError(
            f"update.models_dir: {spec.update.models_dir} is not a folder on the service host",
            field="update.models_dir",
        )
    learner_request(spec.update.resources, 0.0, snapshot, on_ray=learners_on_ray)
    document = spec.model_dump(mode="json")
    follows = not target.nodes and not edge  # given by selector (or all): updates follow it
    document["target"] = {**document["target"], "nodes": nodes,
                          "follows_selector": follows or target.follows_selector}  # fmt: skip
    if edge:
        document["target"]["gpus"] = edge_server_capacity(_one_edge_server(target, nodes, snapshot))
    return DeploymentSpec.model_validate(document)
