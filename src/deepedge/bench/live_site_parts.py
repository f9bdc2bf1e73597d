"""What ``python -m deepedge.bench.live_site`` reads from its site: the cameras' requests
(pure), the deployments' events and jobs through the API, and where Ray placed the actors
(Ray's own actor table)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from deepedge.bench.harness.cameras import Answer
from deepedge.bench.harness.http import Client
from deepedge.dataplane.serving_table import InferenceShare

# -- what the cameras saw (pure) ------------------------------------------------------------


def route_match(answers: Iterable[Answer], routes: dict[str, str], until: float) -> float:
    """The share of the answered requests sent before ``until`` that the replica the
    decision routes their camera to (``routes``: camera -> ``variant@node``) answered."""
    judged = [a for a in answers if a.sent_at < until and a.replica is not None]
    if not judged:
        return 0.0
    return sum(a.replica == routes.get(a.camera) for a in judged) / len(judged)


def answered_by(answers: Iterable[Answer], since: float, until: float) -> dict[str, Counter[str]]:
    """camera -> how many of its requests sent in [since, until) each replica answered
    (``-``: none; a ``*`` after a replica: the router's fallback)."""
    out: dict[str, Counter[str]] = {}
    for a in answers:
        if since <= a.sent_at < until:
            name = "-" if a.replica is None else a.replica + ("*" if a.fallback else "")
            out.setdefault(a.camera, Counter())[name] += 1
    return out


def availability(answers: Iterable[Answer], since: float, until: float) -> tuple[float, int]:
    """(answered / sent, sent) over the requests sent in [since, until)."""
    window = [a for a in answers if since <= a.sent_at < until]
    if not window:
        return 0.0, 0
    return sum(a.replica is not None for a in window) / len(window), len(window)


def share_threads(share: float) -> int:
    """The CPU threads an inference share buys on a server without a GPU (one replica)."""
    return InferenceShare(share).threads()


def share_applied(
    answers: Iterable[Answer], camera: str, allocations: list[tuple[float, float]], node: str,
    settle_s: float,
) -> float:  # fmt: skip
    """The share of ``camera``'s answers given by a replica on ``node`` that reports the
    share of the allocation in force and runs with its threads (``allocations``: (recorded
    at, share), oldest first), judging the requests sent from ``settle_s`` after each
    allocation (the replicas' long poll of the table) to the next."""
    judged: list[bool] = []
    for k, (at, share) in enumerate(allocations):
        until = allocations[k + 1][0] if k + 1 < len(allocations) else float("inf")
        judged += [(a.replica or "").rsplit("@", 1)[-1] == node
                   and a.share is not None and abs(a.share - share) < 1e-6
                   and a.threads == share_threads(share)
                   for a in answers if a.camera == camera and a.replica is not None
                   and at + settle_s <= a.sent_at < until]  # fmt: skip
    return sum(judged) / len(judged) if judged else 0.0


def ekya_allocations(history: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(recorded at, inference share) of each Ekya window's allocation for the stream, in
    the order recorded."""
    out = []
    for event in history:
        detail = event["detail"]
        if event["kind"] == "allocation" and detail.get("policy") == "ekya-window":
            own = next(s for s in detail["streams"] if s["stream_id"] == detail["stream"])
            out.append((float(event["at"]), float(own["inference_gpus"])))
    return out


def update_recovered(history: list[dict[str, Any]], victim: str) -> bool:
    """Whether the update registered its version after losing ``victim``: by its
    ``allocation`` event, launched first with a worker on ``victim``, relaunched, and ending
    on nodes without it."""
    for event in history:
        if event["kind"] == "allocation" and event["version"] == 2:
            launches = event["detail"].get("placements") or []
            return (len(launches) >= 2 and victim in launches[0].values()
                    and victim not in launches[-1].values())  # fmt: skip
    return False


def update_outcome(history: list[dict[str, Any]]) -> str:
    """The update's decision or failure, as its events say."""
    said = [e["message"] for e in history
            if (e["kind"] in {"allocation", "job-failed"} and e["version"] == 2)]  # fmt: skip
    return "; ".join(said) or "nothing recorded"


# -- the site's deployments and actors ------------------------------------------------------


def replicas_on_named_nodes(model: str, routes: dict[str, str]) -> tuple[int, int]:
    """(on the node named, all) over the alive replicas of the decision's groups
    (``variant@node``): on the Ray node of the agent the decision names (Ray's actor
    table)."""
    from deepedge.dataplane.replica_groups import ReplicaGroup
    from deepedge.runtime.cluster.session import alive_actor_nodes, ray_nodes_by_node_id
    from deepedge.runtime.serving.camera_router import group_apps_prefix, group_deployment

    replicas = alive_actor_nodes(f"ServeReplica:{group_apps_prefix(model)}")
    by_deployment = {name.rsplit(":", 1)[1]: nodes for name, nodes in replicas.items()}
    ray_nodes = ray_nodes_by_node_id()
    named = total = 0
    for group in set(routes.values()):
        variant, node = group.split("@")
        ran = by_deployment.get(group_deployment(ReplicaGroup(variant, node, 1)), [])
        named += sum(r == ray_nodes.get(node) for r in ran)
        total += max(1, len(ran))  # a group without a replica counts as misplaced
    return named, total


def app_replicas_on(model: str, node: str) -> tuple[int, int]:
    """(on ``node``, all) over the alive replicas of ``model``'s own application."""
    from deepedge.runtime.cluster.session import alive_actor_nodes, ray_nodes_by_node_id
    from deepedge.runtime.serving.serve_apps import app_name

    ran = [r for nodes in alive_actor_nodes(f"ServeReplica:{app_name(model)}:").values()
           for r in nodes]  # fmt: skip
    return sum(r == ray_nodes_by_node_id().get(node) for r in ran), max(1, len(ran))


def update_actor_nodes() -> list[tuple[str, str]]:
    """(actor class, deepedge node) of every alive actor of an update (Ray's actor table)."""
    from deepedge.runtime.cluster.session import alive_actor_nodes, ray_nodes_by_node_id

    by_ray = {ray_id: node for node, ray_id in ray_nodes_by_node_id().items()}
    return [(cls, by_ray.get(r, "?")) for prefix in ("TrainingWorker", "ParameterServer")
            for cls, nodes in alive_actor_nodes(prefix).items() for r in nodes]  # fmt: skip


def update_actors_named(seen: list[tuple[str, str]], history: list[dict[str, Any]]
                        ) -> tuple[int, int]:  # fmt: skip
    """(on the node named, all) over the update's actors ``seen`` during its first launch:
    a worker on a node its decision's first launch names as a worker, the parameter server
    on the node it names for it (the version's ``allocation`` event)."""
    decision = next((e["detail"] for e in history
                     if e["kind"] == "allocation" and e["version"] == 2), None)  # fmt: skip
    if decision is None or not decision.get("placements"):
        return 0, max(1, len(seen))
    first = decision["placements"][0]
    workers = {member for member in first if member != "parameter-server"}
    named = sum((node in workers) if cls == "TrainingWorker" else node == decision["ps_node"]
                for cls, node in seen)  # fmt: skip
    return named, max(1, len(seen))


def events(client: Client, name: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/deployments/{name}/events?limit=5000")["events"])


def decided_routes(client: Client, name: str) -> dict[str, str]:
    """camera -> ``variant@node`` of the placed deployment ``name``'s decision."""
    decided = next(
        e for e in reversed(events(client, name))
        if e["kind"] == "placement" and e["detail"].get("state") == "decided"
    )  # fmt: skip
    return {r["source"]: f"{r['variant']}@{r['node']}" for r in decided["detail"]["routes"]}


def update_job(client: Client, name: str) -> str:
    """The newest update job of the deployment (its ``job-submitted`` event's)."""
    submitted = [e for e in events(client, name) if e["kind"] == "job-submitted"]
    return str(submitted[-1]["job_id"])


def epochs_done(client: Client, job: str) -> int:
    """Epochs the job reported finished (its metrics)."""
    return len(client.get(f"/v1/jobs/{job}/metrics?limit=1000")["samples"])


def job_running(client: Client, job: str) -> bool:
    return str(client.get(f"/v1/jobs/{job}")["status"]) not in {"COMPLETED", "FAILED", "HALTED"}


def stored_samples(client: Client, name: str) -> int:
    return int(client.get(f"/v1/deployments/{name}/traffic")["samples"]["stored"])


def training_nodes() -> set[str]:
    """deepedge nodes an update's training worker runs on now (Ray's actor table)."""
    return {node for cls, node in update_actor_nodes() if cls == "TrainingWorker"}
