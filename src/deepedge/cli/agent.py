"""``deepedge agent`` (one per device) and ``deepedge profile-node``.

``deepedge agent --address HEAD --id ID --device-type T`` joins the Ray cluster at HEAD
with the device's ``deepedge-node:ID`` resource and Ray node labels (unless a raylet already
advertises the resource), then reports the device's measured state and latency-critical
apps on a heartbeat until it is stopped; SIGTERM drains the node, then leaves
(:mod:`deepedge.runtime.cluster.node_agent`).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import typer

from deepedge.cli import render
from deepedge.cli.app import RayAddress, app, check_number, run_guarded
from deepedge.cli.progress import progress
from deepedge.cli.render import Output, OutputFormat

log = logging.getLogger(__name__)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def agent(
    ctx: typer.Context,
    address: RayAddress = None,
    node_id: str = typer.Option(
        "", "--id", help="this device's deepedge node id (default: the host name)"
    ),
    device_type: str = typer.Option(
        "", "--device-type", help="jetson-tx2, jetson-nano or raspberry-pi-4 (default: by GPU)"
    ),
    app_specs: list[str] = typer.Option(
        [], "--app", help="a latency-critical app, kind:deadline_s[:name] (repeatable)"
    ),
    heartbeat_s: float = typer.Option(1.0, "--heartbeat-s", help="seconds between reports"),
    lost_after_s: float = typer.Option(
        3.0, "--lost-after-s", help="silence after which the registry marks a node lost"
    ),
    join: bool = typer.Option(
        True, "--join/--no-join", help="start this device's raylet if it is not in the cluster"
    ),
    drain_timeout_s: float = typer.Option(
        60.0,
        "--drain-timeout-s",
        help="on SIGTERM/SIGINT: how long to wait for work to move off the node before leaving",
    ),
) -> None:
    """Join a Ray cluster as a deepedge node and report its state on a heartbeat.

    Arguments after ``--`` go to ``ray start`` when the agent joins (e.g. ``-- --num-cpus 2``).
    """

    def body() -> int:
        from deepedge.cluster.devices import DeviceType
        from deepedge.cluster.metrics import GpuProbe
        from deepedge.core.errors import InvalidInputError
        from deepedge.runtime.cluster.node_agent import parse_app, run_agent

        check_number(heartbeat_s, "--heartbeat-s", gt=0.0)
        check_number(lost_after_s, "--lost-after-s", gt=0.0)
        check_number(drain_timeout_s, "--drain-timeout-s", ge=0.0)
        if device_type:
            try:
                device = DeviceType(device_type)
            except ValueError:
                known = ", ".join(d.value for d in DeviceType)
                raise InvalidInputError(
                    f"unknown --device-type {device_type!r} (known: {known})", field="device_type"
                ) from None
        else:
            probe = GpuProbe()
            has_gpu = probe.available
            probe.close()
            if has_gpu:
                raise InvalidInputError(
                    "this host has a GPU: name its --device-type", "device_type"
                )
            device = DeviceType.RASPBERRY_PI_4
        apps = [parse_app(a) for a in app_specs]
        me = node_id or socket.gethostname()

        def ready(nid: str) -> None:
            typer.echo(f"agent {nid} ({device.value}) is reporting to the cluster", err=True)

        def note(line: str) -> None:
            typer.echo(line, err=True)

        return run_agent(
            address,
            me,
            device,
            apps,
            heartbeat_s,
            lost_after_s,
            join=join,
            ray_start_args=list(ctx.args),
            on_ready=ready,
            drain_timeout_s=drain_timeout_s,
            on_note=note,
        )

    code = run_guarded(body)
    raise typer.Exit(code=code)


@app.command("profile-node")
def profile_node(
    node_id: str = typer.Option(..., "--id", help="the deepedge node whose agent profiles"),
    out: str = typer.Option(
        ..., "--out", help="models root (on that node): OUT/<device-type>/models is written"
    ),
    quick: bool = typer.Option(False, "--quick", help="the profiler's and the fit's quick mode"),
    address: RayAddress = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Ask a node's agent to profile its device and fit its device type's learned models
    (minutes: the time it has taken is shown on stderr)."""

    def body() -> dict[str, Any]:
        from deepedge.core.errors import InvalidInputError
        from deepedge.runtime.cluster.node_agent import profile_on_node
        from deepedge.runtime.cluster.session import cluster_address, ray_session

        if cluster_address(address) is None:
            raise InvalidInputError("give --address (or RAY_ADDRESS)", field="address")
        with progress(f"profile-node {node_id}") as bar:
            bar.update(note="connecting to the cluster")
            with ray_session(address=address):
                bar.update(note=f"{node_id}'s agent profiles its device, then fits its models")
                where = profile_on_node(node_id, out, quick)
        return {"node": node_id, "models": where}

    done = run_guarded(body)
    render.emit(done, output, lambda wide: f"{done['node']}: models written to {done['models']}")
