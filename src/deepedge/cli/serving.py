"""``deepedge camera`` and ``deepedge deployments keys|traffic``: the data plane's clients.

``deepedge camera`` streams a workload's windows as live requests to a deployment's Open
Inference Protocol endpoint (:mod:`deepedge.dataplane.camera`), the windows answered and the
requests sent shown on stderr as it goes; ``deployments keys`` creates, lists and revokes the
inference keys cameras hold; ``deployments traffic`` shows a deployment's live request rate,
latency (at the data plane's ingress, what a client sees, and inside its replicas) and canary
share.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from deepedge.cli import render
from deepedge.cli.app import CommandSet, app, check_number, run_guarded
from deepedge.cli.client import Token, Url, connect, reference, segment
from deepedge.cli.completion import complete_deployments
from deepedge.cli.deployments import deployment_path, deployments_app, resolve_deployment
from deepedge.cli.progress import progress
from deepedge.cli.render import Column, Output, OutputFormat
from deepedge.core.errors import InvalidInputError

keys_app = CommandSet(help="A deployment's inference keys (what cameras hold).",
                      no_args_is_help=True)  # fmt: skip
deployments_app.add_typer(keys_app, name="keys")
DataPlaneUrl = Annotated[
    str,
    typer.Option("--endpoint", envvar="DEEPEDGE_DATA_PLANE", help="the data plane's address"),
]
InferenceKey = Annotated[
    str, typer.Option("--key", envvar="DEEPEDGE_INFERENCE_KEY", help="the inference key")
]
Deployment = Annotated[
    str,
    typer.Argument(
        help="deployment name, or a unique id prefix", autocompletion=complete_deployments
    ),
]
KEY_COLUMNS = [
    Column("id", lambda k: render.short_id(k["id"])),
    Column("prefix", lambda k: k["prefix"]),
    Column("name", lambda k: k["name"]),
    Column("state", lambda k: "active" if k["active"] else "revoked"),
    Column("age", lambda k: render.ago(k["created_at"])),
    Column("full id", lambda k: k["id"], wide=True),
    Column("revoked", lambda k: render.clock(k["revoked_at"]), wide=True),
]


@keys_app.command("create")
def keys_create(
    deployment: Deployment,
    name: Annotated[str, typer.Option(help="a label for the key")] = "camera",
    url: Url = None,
    token: Token = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Create an inference key for DEPLOYMENT; the secret is printed once."""

    def _create() -> Any:
        service = connect(url, token)
        named = resolve_deployment(service, deployment)
        return service.call("POST", deployment_path(named, "keys"), json={"name": name})

    body = run_guarded(_create)
    render.emit(body, output, lambda wide: render.fields([
        ("key", body["id"]), ("name", body["name"]), ("model", body["model"]),
        ("endpoint", body["endpoint"]), ("secret (shown once)", body["key"]),
    ]))  # fmt: skip


@keys_app.command("list")
def keys_list(
    deployment: Deployment, url: Url = None, token: Token = None,
    output: Output = OutputFormat.TABLE,
) -> None:  # fmt: skip
    """The deployment's inference keys (no secrets)."""

    def _list() -> Any:
        service = connect(url, token)
        return service.get(deployment_path(resolve_deployment(service, deployment), "keys"))

    body = run_guarded(_list)
    empty = f"No keys. Create one with: deepedge deployments keys create {deployment}"
    render.emit_list(body, body["keys"], KEY_COLUMNS, output, empty)


@keys_app.command("revoke")
def keys_revoke(
    deployment: Deployment,
    key: Annotated[str, typer.Argument(help="the key's id or its shown prefix")],
    url: Url = None,
    token: Token = None,
) -> None:
    """Revoke a key: the data plane refuses it (401) within a second."""

    def _revoke() -> Any:
        checked = segment(reference(key, "key"))
        service = connect(url, token)
        named = resolve_deployment(service, deployment)
        return service.call("DELETE", deployment_path(named, "keys", checked))

    body = run_guarded(_revoke)
    typer.echo(f"key {body['id']} ({body['prefix']}) revoked")


@deployments_app.command("traffic")
def traffic(
    deployment: Deployment,
    url: Url = None,
    token: Token = None,
    span_s: Annotated[float, typer.Option(help="seconds to summarise")] = 10.0,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Live requests per second, latency (at the ingress: what a client sees; in the
    replica: its handler alone) and the canary's share of a deployment."""

    def _traffic() -> Any:
        check_number(span_s, "--span-s", ge=1.0, le=3600.0)
        service = connect(url, token)
        named = resolve_deployment(service, deployment)
        return service.get(deployment_path(named, "traffic"), span_s=span_s)

    body = run_guarded(_traffic)

    def human(wide: bool) -> str:
        t, s = body["traffic"], body["samples"]
        latency = t.get("latency_ms") or {}
        proxy, replica = latency.get("proxy") or {}, latency.get("replica") or {}
        rows: list[tuple[str, object]] = [
            ("model", body["model"]), ("endpoint", body["endpoint"]),
            ("span", render.duration(t["span_s"])),
            ("requests/s", render.rate(t["rps"])), ("images", t["images"]),
            ("failed", t["failed"]),
            ("latency ms at ingress", _latency(proxy)),
            ("latency ms in replica", _latency(replica)),
            ("canary share", render.percent(t["canary_share"])),
            ("samples stored", s["stored"]), ("samples evicted", s["evicted"]),
        ]  # fmt: skip
        if wide:
            rows[6:6] = [("requests", t["requests"])]
            rows += [
                ("latency mean ms", _means(proxy, replica)),
                ("ingress measures", proxy.get("measured", render.NOTHING)),
                ("replica measures", replica.get("measured", render.NOTHING)),
                ("samples appended", s.get("appended")),
                ("samples MB", render.rate((s.get("bytes") or 0) / 1e6)),
                ("data plane", "yes" if body.get("data_plane") else "no"),
            ]
        return render.fields(rows)

    render.emit(body, output, human)


def _latency(part: dict[str, Any]) -> str:
    """``p50 12.3  p95 20.1  p99 34.0``, and how whole the figures are where they are not
    (the ingress's: some seconds not covered, or none)."""
    figures = "  ".join(f"{q} {render.rate(part.get(q))}" for q in ("p50", "p95", "p99"))
    state = part.get("state", "complete")
    if state == "unavailable":
        return f"not measured: {part.get('reason') or 'no figures'}"
    if state == "partial":
        return f"{figures}  (covers {part.get('covered_s')} of {part.get('span_s')} s)"
    return figures


def _means(proxy: dict[str, Any], replica: dict[str, Any]) -> str:
    return (f"at ingress {render.rate(proxy.get('mean'))}, "
            f"in replica {render.rate(replica.get('mean'))}")  # fmt: skip


@app.command()
def camera(
    model: Annotated[str, typer.Argument(help="the endpoint's model name, <tenant>.<deployment>")],
    key: InferenceKey = "",
    endpoint: DataPlaneUrl = "http://127.0.0.1:8000",
    workload: Annotated[
        str,
        typer.Option(
            help="digits (the site's drifting digits), a bundled workload, or a "
            "workload file (a folder of your images: its data section)"
        ),
    ] = "digits",
    rate: Annotated[float, typer.Option(help="requests per second")] = 50.0,
    window_s: Annotated[float, typer.Option(help="seconds of traffic per window")] = 2.0,
    windows: Annotated[int, typer.Option(help="windows to send")] = 10,
    first_window: Annotated[int, typer.Option(help="the source's window to start from")] = 0,
    feedback: Annotated[
        float, typer.Option(help="share of sampled requests whose true label is sent back")
    ] = 0.0,
    seed: Annotated[int, typer.Option(help="the digits' drift seed")] = 0,
    onset: Annotated[int, typer.Option(help="the digits' first drifted window")] = 3,
    ramp: Annotated[int, typer.Option(help="windows the digits' drift takes to peak")] = 2,
    concurrency: Annotated[int, typer.Option(help="requests in flight at most")] = 64,
    camera_id: Annotated[
        str | None,
        typer.Option(
            "--camera",
            help="this camera's id (a placed deployment routes each "
            "camera to the replicas its placement names)",
        ),
    ] = None,
    output: Output = OutputFormat.TABLE,
) -> None:
    """Stream a workload's windows as live requests to an endpoint (one image per request,
    binary tensors); print what each window was answered (progress on stderr)."""
    import asyncio

    from deepedge.dataplane.camera import CameraConfig, WindowReport, run_camera

    def _run() -> list[WindowReport]:
        check_number(rate, "--rate", gt=0.0, le=100_000.0)
        check_number(window_s, "--window-s", gt=0.0, le=86_400.0)
        check_number(feedback, "--feedback", ge=0.0, le=1.0)
        if windows < 1 or concurrency < 1:
            raise InvalidInputError("--windows and --concurrency must be at least 1")
        if not key:
            raise InvalidInputError("an inference key is needed (--key or "
                                    "DEEPEDGE_INFERENCE_KEY; deepedge deployments keys create)",
                                    field="key")  # fmt: skip
        source = camera_source(workload, seed, onset, ramp)
        config = CameraConfig(endpoint.rstrip("/"), model, key, rate, window_s, windows,
                              first_window, feedback, concurrency, seed=seed,
                              camera=camera_id)  # fmt: skip
        human = output in (OutputFormat.TABLE, OutputFormat.WIDE)
        sent = 0

        def on_window(report: WindowReport) -> None:
            nonlocal sent
            sent += report.sent
            if human:
                _print_window(report)
            note = f"window {report.window}: {report.answered}/{report.sent} answered"
            bar.update(report.window - first_window + 1, note=f"{note}; {sent} requests sent")

        with progress("camera", total=windows, unit="windows") as bar:
            return asyncio.run(run_camera(config, source, on_window))

    reports = run_guarded(_run)
    if output in (OutputFormat.JSON, OutputFormat.YAML):
        render.emit({"windows": [r.document() for r in reports]}, output, lambda wide: "")


def _print_window(report: Any) -> None:
    d = report.document()
    acc = "-" if d["accuracy"] is None else f"{d['accuracy']:.3f}"
    share = "" if d["canary_share"] is None else f", canary share {d['canary_share']:.0%}"
    p99 = "-" if d["latency_p99_ms"] is None else f"{d['latency_p99_ms']:.0f} ms"
    versions = ", ".join(f"v{v}: {n}" for v, n in sorted(d["versions"].items())) or "none"
    typer.echo(f"window {d['window']:>3}: {d['answered']}/{d['sent']} answered "
               f"({d['failed']} failed), accuracy {acc}, {versions}{share}, p99 {p99}, "
               f"{d['sampled']} sampled, {d['feedback']} labelled")  # fmt: skip


def camera_source(workload: str, seed: int, onset: int, ramp: int) -> Any:
    """``window(t) -> (images, labels)`` of the camera's source: the site's drifting digits,
    or a workload's windows (its images read, resized and normalised as its document says,
    which is what its model was trained on)."""
    import numpy as np

    if workload == "digits":
        from deepedge.learning.stream import DriftConfig, DriftingStream, load_digits_images

        stream = DriftingStream(
            load_digits_images(16),
            DriftConfig(seed=seed, window_size=400, eval_size=1, onset_window=onset,
                        ramp_windows=ramp),
        )  # fmt: skip

        def digits(t: int) -> tuple[np.ndarray, np.ndarray]:
            w = stream.window(t)
            return w.images, w.labels

        return digits
    from deepedge.workload.resolve import load_workload

    loaded = load_workload(workload)
    n = loaded.source.n_windows

    def window(t: int) -> tuple[np.ndarray, np.ndarray]:
        data = loaded.window(t % n if n else t)
        return data.images, data.labels

    return window
