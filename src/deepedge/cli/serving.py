"""``deepedge camera`` and ``deepedge deployments keys|traffic``: the data plane's clients.

``deepedge camera`` streams a workload's windows as live requests to a deployment's Open
Inference Protocol endpoint (:mod:`deepedge.dataplane.camera`); ``deployments keys``
creates, lists and revokes the inference keys cameras hold; ``deployments traffic`` shows a
deployment's live request rate, latency and canary share.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from deepedge.cli.app import app, check_number, echo_json, run_guarded
from deepedge.cli.deployments import JsonFlag, deployments_app
from deepedge.cli.jobs import DEFAULT_URL, Token, Url, _call
from deepedge.core.errors import InvalidInputError

keys_app = typer.Typer(help="A deployment's inference keys (what cameras hold).",
                       no_args_is_help=True)  # fmt: skip
deployments_app.add_typer(keys_app, name="keys")
DataPlaneUrl = Annotated[
    str,
    typer.Option("--endpoint", envvar="DEEPEDGE_DATA_PLANE", help="the data plane's address"),
]
InferenceKey = Annotated[
    str, typer.Option("--key", envvar="DEEPEDGE_INFERENCE_KEY", help="the inference key")
]


@keys_app.command("create")
def keys_create(
    deployment: str,
    name: Annotated[str, typer.Option(help="a label for the key")] = "camera",
    url: Url = DEFAULT_URL,
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Create an inference key for DEPLOYMENT; the secret is printed once."""
    body = run_guarded(lambda: _call(url, token, "POST", f"/v1/deployments/{deployment}/keys",
                                     json={"name": name}))  # fmt: skip
    if as_json:
        echo_json(body)
        return
    typer.echo(f"key {body['id']} ({body['name']}) for model {body['model']}")
    typer.echo(f"endpoint: {body['endpoint']}")
    typer.echo(f"secret (shown once): {body['key']}")


@keys_app.command("list")
def keys_list(
    deployment: str, url: Url = DEFAULT_URL, token: Token = "", as_json: JsonFlag = False
) -> None:
    """The deployment's inference keys (no secrets)."""
    body = run_guarded(lambda: _call(url, token, "GET", f"/v1/deployments/{deployment}/keys"))
    if as_json:
        echo_json(body)
        return
    typer.echo(f"{'ID':<32} {'PREFIX':<12} {'NAME':<16} STATE")
    for k in body["keys"]:
        typer.echo(f"{k['id']:<32} {k['prefix']:<12} {k['name']:<16} "
                   f"{'active' if k['active'] else 'revoked'}")  # fmt: skip


@keys_app.command("revoke")
def keys_revoke(
    deployment: str,
    key: Annotated[str, typer.Argument(help="the key's id or its shown prefix")],
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Revoke a key: the data plane refuses it (401) within a second."""
    body = run_guarded(
        lambda: _call(url, token, "DELETE", f"/v1/deployments/{deployment}/keys/{key}")
    )
    typer.echo(f"key {body['id']} ({body['prefix']}) revoked")


@deployments_app.command("traffic")
def traffic(
    deployment: str,
    url: Url = DEFAULT_URL,
    token: Token = "",
    span_s: Annotated[float, typer.Option(help="seconds to summarise")] = 10.0,
    as_json: JsonFlag = False,
) -> None:
    """Live requests per second, latency and the canary's share of a deployment."""
    body = run_guarded(lambda: _call(url, token, "GET", f"/v1/deployments/{deployment}/traffic",
                                     params={"span_s": span_s}))  # fmt: skip
    if as_json:
        echo_json(body)
        return
    t, s = body["traffic"], body["samples"]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    share = "-" if t["canary_share"] is None else f"{t['canary_share']:.1%}"
    typer.echo(f"{body['model']} at {body['endpoint']}")
    typer.echo(f"last {t['span_s']:.0f} s: {t['rps']:.1f} requests/s, p50 "
               f"{ms(t['latency_p50_ms'])}, p99 {ms(t['latency_p99_ms'])}, {t['failed']} failed, "
               f"canary share {share}")  # fmt: skip
    typer.echo(f"sample store: {s['stored']} samples ({s['bytes'] / 2**20:.1f} MiB), "
               f"{s['evicted']} evicted by retention")  # fmt: skip


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
    as_json: JsonFlag = False,
) -> None:
    """Stream a workload's windows as live requests to an endpoint (one image per request,
    binary tensors); print what each window was answered."""
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
                              first_window, feedback, concurrency, seed=seed)  # fmt: skip
        return asyncio.run(run_camera(config, source, None if as_json else _print_window))

    reports = run_guarded(_run)
    if as_json:
        echo_json([r.document() for r in reports])


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
