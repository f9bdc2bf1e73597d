"""``deepedge nodes``: the site's nodes, as the service knows them or as the cluster's
registry does.

Without ``--address`` it asks the service (``--url``/``--token``, else the context) for
``GET /v1/nodes`` and prints it: each node's device, state and measured load and, with
``-o wide``, which Ray node it is (the first :data:`RAY_ID` characters of its id, its
address and host) and what of the tenant's runs there (serving replicas, a running update's
workers and parameter server, an Ekya window, a learner on Ray;
:mod:`deepedge.api.node_work`), and since when a lost node is lost. ``-o json`` and ``-o yaml``
print the API's document unchanged. With ``--address`` (or ``RAY_ADDRESS``) it reads the
node registry on that Ray cluster directly (no service needed): status, time since the
last report, load, and with ``-o wide`` the host, Ray node and address.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import app, run_guarded
from deepedge.cli.client import Token, Url, connect
from deepedge.cli.render import Column, Output, OutputFormat

RAY_ID = 12  # the characters of a Ray node id a table shows (as Ray's own logs do)
GONE = ("lost", "left")  # a node whose last report says nothing of now
WORK_WORDS = {
    "replicas": "replicas",
    "update-worker": "worker",
    "parameter-server": "parameter server",
    "window": "Ekya window",
    "learner": "learner",
}

ClusterAddress = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="read the node registry of this Ray cluster (its head's host:port) instead of "
        "asking the service",
    ),
]


def ray_id(value: str | None) -> str | None:
    return value[:RAY_ID] if value else None


def work_text(item: dict[str, Any]) -> str:
    """One thing on a node: ``line replicas v3``, ``worker of 3f23ad6c (line)``."""
    kind = WORK_WORDS.get(item["kind"], item["kind"])
    if item["kind"] == "replicas":
        return f"{item['deployment']} {kind} {render.version(item.get('version'))}"
    of = f"{kind} of {render.short_id(item.get('job'))}"
    return of + (f" ({item['deployment']})" if item.get("deployment") else "")


def load(node: dict[str, Any], key: str) -> str:
    """A node's measured (or emulated) load; nothing for a lost or left node, whose last
    report says nothing of now."""
    if node.get("state") in GONE:
        return render.NOTHING
    figures = node.get("utilisation") or node.get("emulated_utilisation") or {}
    return render.percent(figures.get(key))


def lost_since(node: dict[str, Any]) -> str | None:
    return render.when(node["lost_at"]) if node.get("lost_at") is not None else None


SERVICE_COLUMNS = [
    Column("node", lambda n: n["name"]),
    Column("device", lambda n: n.get("device")),
    Column("role", lambda n: n.get("role")),
    Column("state", lambda n: n.get("state")),
    Column("cpu", lambda n: load(n, "cpu"), right=True),
    Column("memory", lambda n: load(n, "mem"), right=True),
    Column("gpu", lambda n: load(n, "gpu"), right=True),
    Column("deployments", lambda n: n.get("deployments")),
    Column("jobs", lambda n: [render.short_id(j) for j in n.get("jobs") or []]),
    Column("ray node", lambda n: ray_id(n.get("ray_node_id")), wide=True),
    Column("address", lambda n: n.get("address"), wide=True),
    Column("host", lambda n: n.get("hostname"), wide=True),
    Column("runs", lambda n: "; ".join(work_text(w) for w in n.get("work") or []), wide=True),
    Column("lost since", lost_since, wide=True),
]
REGISTRY_COLUMNS = [
    Column("node", lambda n: n["node_id"]),
    Column("device", lambda n: n["device"]),
    Column("status", lambda n: n["status"]),
    Column("last report", lambda n: render.duration(n["age_s"]) + " ago"),
    Column("cpu", lambda n: render.percent(render.get(n, "state", "cpu_util")), right=True),
    Column("memory", lambda n: render.percent(render.get(n, "state", "mem_util")), right=True),
    Column("gpu", lambda n: render.percent(render.get(n, "state", "gpu_util")), right=True),
    Column("apps", lambda n: len(n.get("apps") or []), right=True),
    Column("host", lambda n: n.get("hostname"), wide=True),
    Column("ray node", lambda n: n.get("ray_node_id"), wide=True),
    Column("address", lambda n: n.get("address"), wide=True),
]


@app.command()
def nodes(
    address: ClusterAddress = None,
    url: Url = None,
    token: Token = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """The site's nodes: device, state and load; with -o wide their Ray nodes and what runs
    on each.

    Asks the service (GET /v1/nodes); with --address (or RAY_ADDRESS), the node registry of
    that Ray cluster instead (docs/CLUSTER.md).
    """
    if address and address.strip() != "local":  # (an embedded Ray has no registry)
        _registry_nodes(address, output)
        return
    page = run_guarded(lambda: connect(url, token).get("/v1/nodes"))
    footer = None
    if page.get("cluster"):
        taken = render.when(page.get("taken_at"))
        footer = f"(the agents of the Ray cluster at {page['cluster']}, seen {taken})"
        if page.get("stale"):
            footer += "; stale: the service's node watcher cannot reach the cluster"
    empty = "No nodes: the service's cluster has no agent yet (docs/CLUSTER.md)."
    render.emit_list(page, page["nodes"], SERVICE_COLUMNS, output, empty, footer)


def _registry_nodes(address: str, output: OutputFormat) -> None:
    def body() -> list[dict[str, Any]]:
        import dataclasses
        import json

        from deepedge.runtime.cluster.node_agent import registered_nodes
        from deepedge.runtime.cluster.node_snapshot import ray_node_table
        from deepedge.runtime.cluster.session import ray_session

        with ray_session(address=address):
            views = registered_nodes()
            table = ray_node_table()
        listed = [
            {"status": v.status.value, "age_s": round(v.age_s, 2), **dataclasses.asdict(v.report),
             "address": str(table.get(v.report.ray_node_id, {}).get("NodeManagerAddress", ""))}
            for v in views
        ]  # fmt: skip
        return list(json.loads(json.dumps(listed, default=str)))  # enums as their values

    listed = run_guarded(body)
    empty = "No nodes have reported: start `deepedge agent --address HEAD` on each device."
    render.emit_list(listed, listed, REGISTRY_COLUMNS, output, empty)
