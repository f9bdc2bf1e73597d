"""Data-plane benchmark: ``python -m deepedge.bench.serving [--quick]``.

One real service on loopback with its data plane (supervisor, API, manager, and an
embedded Ray head with Ray Serve), a deployment of the ResNet-18-class ``resnet-photos``
workload (``--quick``: the site's digits CNN) whose first version the service trains and
exports itself, and an inference key. Everything runs on this machine; the figures are:

1. **Rate.** ``wrk`` (one thread) posts a camera's request (one 3x64x64 image in the binary
   tensor extension) with 8-64 connections; the best sustained images/s over a bare torch
   loop of the same model (frozen TorchScript, what the data plane served before it served
   ONNX, and the eager model: the faster of the two) at batch 32 (``rps_ratio``) and batch
   1 (``rps_vs_unbatched``), on the same cores. The bare loop of the served ONNX graph
   (ONNX Runtime) is measured beside them (``onnx_vs_torchscript``: its images/s over
   TorchScript's at batch 32). The CPU of each hop per request (client, the data plane's
   ingress, Serve's HAProxy and proxy with its router, the replica, the model, the rest)
   is measured over the best run.
2. **Latency** at half that rate, open loop (latency from each request's scheduled time),
   and the data plane's own figures of the same load from its traffic route: at its
   ingress, what a client sees (``proxy_p50_ms``, ``proxy_p99_ms``), and inside the
   replicas (``replica_p50_ms``, ``replica_p99_ms``).
3. **Swaps.** Under that load, the serving version switches 1 -> 2 -> 1 ... (``--swaps``)
   as the control loop commits a promotion or a rollback to the store; each waits until the
   answers name the new version. ``failed_during_swaps`` counts non-200 answers.
4. **Canary.** v2 as a canary on the deployment's share (0.25): the measured share of the
   routed requests minus the configured one.
5. **Samples.** ``kill -9`` of the sample writer under load: ``samples_lost`` counts
   acknowledged samples (answers with ``sampled: true``) missing from the store after.
6. **Control-plane crash.** ``kill -9`` of the API and of the manager, three times, under
   load: the share of requests answered 200.
7. **Trigger lag.** A digits deployment fed by a camera whose stream drifts at once: windows
   from the first drifted window of live traffic to the one that triggered the update.
8. **Protocol.** tritonclient's metadata, ready and infer calls.
9. **The ingress's hop.** The camera's request one at a time, alternately through the data
   plane's ingress and straight to Serve behind it on loopback (each on a kept-alive
   connection): the difference of the medians (``ingress_added_ms``), and the same for a
   model's ``ready``, which no batch waits for (``ingress_added_ready_ms``); -1 when
   Serve's port is not known (not its high-throughput mode).

Last line: ``RESULT rps_ratio=... onnx_vs_torchscript=... rps_vs_unbatched=... p50_ms=...
p99_ms=... proxy_p50_ms=... proxy_p99_ms=... replica_p50_ms=... replica_p99_ms=...
swaps=... failed_during_swaps=... canary_share_err=... version_tagged_frac=...
samples_lost=... dataplane_avail_cp_crash=... trigger_lag_windows=... oip_client_ok=...
ingress_added_ms=... ingress_added_ready_ms=...``

``--restart``: instead, the data plane's restart under load (``kill -9`` of the whole
service tree beside ``stress-ng``), :mod:`deepedge.bench.serving_restart`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepedge.bench.harness.cameras import camera_request
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.site import (
    DeploymentSite,
    Tenant,
    served_key,
    start_deployment_site,
)
from deepedge.bench.serving_load import (
    OpenLoop,
    Reply,
    WrkRun,
    cpu_seconds,
    ingress_hop,
    measured_latency,
    ray_process,
    wrk_rate,
)
from deepedge.dataplane.ingress_traffic import REPORT_LAG_S

log = logging.getLogger(__name__)

TOKEN = "tok-serving"
CANARY_SHARE = 0.25


@dataclass(frozen=True)
class ServingScale(Scale):
    workload: str
    seconds: float  # each measured load phase
    connections: tuple[int, ...]
    swaps: int
    canary_requests: int
    hop_pairs: int  # requests each way for the ingress's hop


SCALES = Sizes(
    full=ServingScale(workload="resnet-photos", seconds=20.0, connections=(8, 16, 32, 64),
                      swaps=12, canary_requests=3000, hop_pairs=1000),
    quick=ServingScale(workload="digits", seconds=5.0, connections=(16,), swaps=4,
                       canary_requests=600, hop_pairs=300),
)  # fmt: skip


def _spec(scale: ServingScale) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    spec: dict[str, Any] = {
        "name": "bench",
        "workload": scale.workload,
        "window_s": 5.0,
        "base_windows": 1,
        "base_epochs": 1,
        "trigger": {"sample_count": None, "accuracy_threshold": 0.0, "cooldown_windows": 1000},
        "canary": {"fraction": CANARY_SHARE, "windows": 100},
        # One single-threaded replica per core: one replica with a torch thread per core
        # had its event loop (HTTP, OIP, batching) fight the model's threads for the cores
        # and served 69.5 images/s where two of one core each served 103 (docs/BENCHMARKS).
        "serving": {"replicas": cores, "cpus": 1.0, "max_batch_size": 32,
                    "batch_wait_ms": 10.0, "sample_fraction": 0.1},
    }  # fmt: skip
    if scale.workload == "digits":
        spec["labeller"] = "ground-truth"
    return spec


# -- 1. rate -------------------------------------------------------------------------------


def bare_loops(
    site: DeploymentSite, scale: ServingScale, images: np.ndarray, seconds: float
) -> dict[str, float]:
    """Images/s of a bare loop over the served ONNX graph (ONNX Runtime), the model frozen
    as TorchScript and the eager model, at batch 32 and 1, on this process's cores; and
    the CPU ms one image costs at batch 32."""
    import torch

    from deepedge.controlplane.artifacts import load_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.dataplane.served_graph import GraphSession
    from deepedge.learning.export import ServedModel

    cores = os.cpu_count() or 1
    torch.set_num_threads(cores)
    folder = next((site.data_dir / "deployments").glob(f"*/{site.deployment_id}"))
    spec = DeploymentSpec.model_validate(_spec(scale))
    eager = load_version(spec, folder / "v1.pt")
    served = ServedModel.read(folder / "v1.serve.json")
    graph = GraphSession.load(folder / "v1.serve.onnx", served.input_shape,
                              len(served.class_names), threads=cores)  # fmt: skip
    models: dict[str, Any] = {
        "onnx": lambda x: graph.run(x.numpy()),
        "torchscript": torch.jit.freeze(torch.jit.script(eager)),
        "eager": eager,
    }
    out: dict[str, float] = {}
    for name, model in models.items():
        for batch in (32, 1):
            x = torch.from_numpy(np.ascontiguousarray(
                np.resize(images, (batch, *images.shape[1:])).astype(np.float32)))  # fmt: skip
            with torch.inference_mode():
                for _ in range(3):
                    model(x)
                n, cpu0, start = 0, time.process_time(), time.perf_counter()
                while time.perf_counter() - start < seconds:
                    model(x)
                    n += batch
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
            out[f"{name}_b{batch}"] = n / wall
            out[f"{name}_b{batch}_cpu_ms"] = cpu * 1000 / n
    return out


def rate(
    site: DeploymentSite, body: bytes, headers: dict[str, str], scale: ServingScale
) -> tuple[WrkRun, dict[str, float]]:
    """The best wrk run, and the CPU each hop spent in it (seconds)."""
    url = site.key.endpoint + "/infer"
    header_length = int(headers["Inference-Header-Content-Length"])
    runs: list[tuple[WrkRun, dict[str, float]]] = []
    for connections in scale.connections:
        before = _hop_cpu()
        run = wrk_rate(url, body, header_length, site.key.key, connections, scale.seconds)
        after = _hop_cpu()
        runs.append((run, {k: after[k] - before[k] for k in after} | {"client": run.cpu_s}))
    return max(runs, key=lambda r: r[0].rps)


HOPS = {
    "the data plane's ingress (HAProxy)": lambda line: "deepedge-ingress-" in line,
    "Serve's HAProxy": lambda line: "haproxy.cfg" in line,
    "proxy (Serve's HTTP proxy and router)": ray_process("ProxyActor"),
    "replica (OIP, keys, routing, batching, sampling, and the model)": ray_process(
        "ServeReplica:model-"
    ),
    "sample writer": ray_process("SampleWriter"),
    "Serve controller and data-plane controller": lambda line: (
        line.startswith("ray::") and ("ServeController" in line or "DataPlaneController" in line)
    ),
    "Ray (raylet, GCS)": lambda line: "raylet" in line or "gcs_server" in line,
}


def _hop_cpu() -> dict[str, float]:
    return {hop: cpu_seconds(match) for hop, match in HOPS.items()}


# -- 2-6. runs under open-loop load ------------------------------------------------------------


def open_loop(site: DeploymentSite, body: bytes, headers: dict[str, str], rps: float) -> OpenLoop:
    return OpenLoop(site.key.endpoint + "/infer", body, {**headers, **site.key.auth()}, rps)


def commit_versions(site: DeploymentSite, **fields: Any) -> None:
    """Commit deployment fields as the control loop does (compare-and-set, retried)."""
    from deepedge.controlplane.deployments import DeploymentStore, Step
    from deepedge.controlplane.records import DeploymentId
    from deepedge.core.errors import ConflictError
    from deepedge.service.store import JobStore

    store = JobStore(site.server.settings.url)
    try:
        registry = DeploymentStore(store)
        for _ in range(50):
            try:
                registry.commit(
                    registry.get_by_id(DeploymentId(site.deployment_id)), Step(deployment=fields)
                )
                return
            except ConflictError:
                time.sleep(0.05)
        raise RuntimeError("the control loop kept changing the deployment")
    finally:
        store.dispose()


def second_version(site: DeploymentSite, scale: ServingScale) -> None:
    """v2: v1 with its classifier's weights nudged, written and exported as the control
    loop writes a trained version, then registered beside v1."""
    import torch

    from deepedge.controlplane.artifacts import load_version, served_path, write_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step
    from deepedge.controlplane.records import DeploymentId
    from deepedge.controlplane.rollout_status import VersionStatus
    from deepedge.controlplane.site import Site
    from deepedge.service.store import JobStore

    folder = next((site.data_dir / "deployments").glob(f"*/{site.deployment_id}"))
    spec = DeploymentSpec.model_validate(_spec(scale))
    model = load_version(spec, folder / "v1.pt")
    with torch.no_grad():
        last = [p for p in model.parameters()][-2]
        last.add_(0.01 * torch.randn_like(last))
    write_version(folder / "v2.pt", model)
    store = JobStore(site.server.settings.url)
    registry = DeploymentStore(store)
    if spec.user_workload is not None:  # (the bench is the operator: no tenant sandbox)
        from deepedge.controlplane.workload_task import export

        export(spec, folder / "v2.pt", served_path(folder / "v2.pt"))
    else:
        record = registry.get_by_id(DeploymentId(site.deployment_id))
        Site(site.data_dir).export(record, folder / "v2.pt")
    # (RETIRED: a version that has served; the loop gates and canaries only new ones)
    registry.commit(registry.get_by_id(DeploymentId(site.deployment_id)), Step(
        new_versions=(NewVersion(2, 1, (), "bench", status=VersionStatus.RETIRED),)))  # fmt: skip
    store.dispose()


def _wait_version(loop: OpenLoop, version: str, since: int, timeout_s: float = 60.0) -> float:
    """Seconds until 20 answers in a row after index ``since`` name ``version``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        recent = [a for a in loop.answers[since:] if a.status == 200][-20:]
        if len(recent) == 20 and all(a.version == version for a in recent):
            return time.monotonic() - start
        time.sleep(0.05)
    raise RuntimeError(f"version {version} never answered")


def swaps(site: DeploymentSite, loop: OpenLoop, count: int) -> dict[str, Any]:
    start = len(loop.answers)
    seconds = []
    for k in range(count):
        to, back = (2, 1) if k % 2 == 0 else (1, 2)
        mark = len(loop.answers)
        commit_versions(site, serving_version=to, previous_version=back)
        seconds.append(_wait_version(loop, str(to), mark))
    answers = loop.answers[start:]
    return {"swaps": count, "failed": sum(a.status != 200 for a in answers),
            "answers": len(answers), "swap_s_max": max(seconds),
            "swap_s_mean": float(np.mean(seconds))}  # fmt: skip


def canary(site: DeploymentSite, loop: OpenLoop, requests: int) -> dict[str, Any]:
    commit_versions(site, canary_version=2)
    deadline = time.monotonic() + 60
    while not any(a.route == "canary" for a in loop.answers[-200:]):
        if time.monotonic() > deadline:
            raise RuntimeError("the canary never answered")
        time.sleep(0.05)
    start = len(loop.answers)
    while len(loop.answers) - start < requests:
        time.sleep(0.1)
    routed = [a for a in loop.answers[start:] if a.status == 200 and a.route != "pinned"]
    share = sum(a.route == "canary" for a in routed) / len(routed)
    commit_versions(site, canary_version=None)
    return {"share": share, "err": abs(share - CANARY_SHARE), "routed": len(routed)}


def samples_after_writer_kill(
    site: DeploymentSite, loop: OpenLoop, seconds: float
) -> dict[str, Any]:
    from deepedge.dataplane.sample_store import SampleStore, sample_store_path

    start = len(loop.answers)
    time.sleep(seconds / 3)
    writers = [p for p in _pids(ray_process("SampleWriter"))]
    for pid in writers:
        os.kill(pid, 9)
    time.sleep(2 * seconds / 3)
    answers = loop.answers[start:]
    acked = [a.request_id for a in answers if a.sampled and a.request_id]
    store = SampleStore(sample_store_path(site.data_dir))
    lost = sum(store.get(site.deployment_id, rid) is None for rid in acked)
    return {"killed": len(writers), "acked": len(acked), "lost": lost,
            "not_sampled_200": sum(a.status == 200 and not a.sampled for a in answers),
            "failed": sum(a.status != 200 for a in answers)}  # fmt: skip


def _pids(match: Any) -> list[int]:
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if match(" ".join(proc.info["cmdline"] or [])):
                out.append(proc.pid)
    return out


def control_plane_crash(site: DeploymentSite, loop: OpenLoop, seconds: float) -> dict[str, Any]:
    start = len(loop.answers)
    killed = 0
    for _ in range(3):
        time.sleep(seconds / 4)
        killed += len(site.server.kill9_roles("api", "manager"))
    time.sleep(seconds / 4)
    answers = loop.answers[start:]
    ok = sum(a.status == 200 for a in answers)
    return {"killed": killed, "answered": ok, "requests": len(answers),
            "availability": ok / max(1, len(answers))}  # fmt: skip


# -- 7. trigger lag, 8. protocol --------------------------------------------------------------


def trigger_lag(site: DeploymentSite, quick: bool) -> dict[str, Any]:
    """A digits deployment (stream drifting at once at window ``onset``) fed by a camera
    that sends the true labels back; windows from the first drifted window of its traffic
    to the window whose accuracy drop triggered the update."""
    from deepedge.cli.serving import camera_source
    from deepedge.dataplane.camera import CameraConfig, run_camera

    window_s, onset = 2.0, 4
    spec = {"name": "line", "labeller": "ground-truth", "window_s": window_s,
            "stream": {"seed": 3, "window_size": 200, "onset_window": onset, "ramp_windows": 1},
            "update": {"label_fraction": 1.0, "recent_windows": 1, "epochs": 2},
            "trigger": {"sample_count": None, "accuracy_threshold": 0.8, "cooldown_windows": 1},
            "serving": {"cpus": 0.25, "sample_fraction": 1.0}}  # fmt: skip
    site.client.post("/v1/deployments", spec)
    key = served_key(site.client, "line", 900, probe_timeout_s=10.0)
    config = CameraConfig(key.base_url, key.model, key.key, rate=40.0, window_s=window_s,
                          windows=onset + 8, feedback=1.0)  # fmt: skip
    started = time.time()
    reports = asyncio.run(run_camera(config, camera_source("digits", 3, onset, 1)))
    # The stream's window ``onset`` is its last undrifted one (DriftConfig: severity
    # (t - onset) / ramp); the camera sends window w from started + w * window_s.
    drift_at = started + (onset + 1) * window_s
    trigger = None
    for _ in range(60):
        events = site.client.get("/v1/deployments/line/events")["events"]
        trigger = next((e for e in events if e["kind"] == "trigger"), None)
        if trigger is not None:
            break
        time.sleep(1.0)
    windows = site.client.get("/v1/deployments/line/windows")["windows"]
    drifted = [w["window"] for w in windows if w["due_at"] - window_s / 2 >= drift_at]
    first = min(drifted) if drifted else None
    lag = None if trigger is None or first is None else trigger["window"] - first
    before = [r.accuracy for r in reports[:onset] if r.accuracy is not None]
    after = [r.accuracy for r in reports[onset:] if r.accuracy is not None]
    return {"first_drifted_window": first, "trigger_window": trigger and trigger["window"],
            "lag_windows": lag,
            "camera_accuracy_before": float(np.mean(before)) if before else None,
            "camera_accuracy_drifted": float(np.mean(after[:2])) if after else None}  # fmt: skip


def oip_client(site: DeploymentSite, images: np.ndarray) -> bool:
    import tritonclient.http as triton

    client = triton.InferenceServerClient(site.key.base_url.split("//")[1])
    auth, model = site.key.auth(), site.key.model
    given = triton.InferInput("input", [1, *images.shape[1:]], "FP32")
    given.set_data_from_numpy(images[:1].astype(np.float32), binary_data=True)
    result = client.infer(model, [given],
                          outputs=[triton.InferRequestedOutput("label", binary_data=True)],
                          headers=auth)  # fmt: skip
    metadata = client.get_model_metadata(model, headers=auth)
    return bool(
        client.is_server_ready() and client.is_model_ready(model, headers=auth)
        and metadata["name"] == model and result.as_numpy("label").shape == (1,)
        and result.get_response()["model_version"] in {"1", "2"}
    )  # fmt: skip


# -- the run -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    scale = SCALES.pick(args.quick)
    if args.seconds:
        scale = scale.but(seconds=args.seconds)
    cores = os.cpu_count() or 1
    print(f"machine: {machine_description()}; workload {scale.workload}", flush=True)
    keep = args.keep is not None
    if keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.nullcontext(str(args.keep)) if keep
        else tempfile.TemporaryDirectory(prefix="deepedge-bench-serving-")
    ) as tmp:  # fmt: skip
        started = time.monotonic()
        site = start_deployment_site(Path(tmp), Tenant("bench", TOKEN), _spec(scale))
        print(
            f"service and data plane up, first version served: {time.monotonic() - started:.0f} s",
            flush=True,
        )
        try:
            return _measure(site, scale, cores)
        finally:
            site.stop()


def _measure(site: DeploymentSite, scale: ServingScale, cores: int) -> dict[str, Any]:
    body, headers, images = camera_request(scale.workload)
    bare = bare_loops(site, scale, images, scale.seconds / 2)
    best, hop_cpu = rate(site, body, headers, scale)
    b32 = max(bare["torchscript_b32"], bare["eager_b32"])
    b1 = max(bare["torchscript_b1"], bare["eager_b1"])
    loops = ("onnx_b32", "torchscript_b32", "eager_b32", "onnx_b1", "torchscript_b1",
             "eager_b1")  # fmt: skip
    print(table(["loop", "images/s", "CPU ms/image"],
                [[k, bare[k], bare[f"{k}_cpu_ms"]] for k in loops]))  # fmt: skip
    print(f"sustained through HTTP: {best.rps:.1f} images/s with {best.connections} connections "
          f"({best.errors} errors); wrk used {best.cpu_s / best.seconds / cores:.1%} of the "
          f"{cores} cores")  # fmt: skip
    model_ms = bare["onnx_b32_cpu_ms"]
    rows = [["client (wrk)", hop_cpu["client"] * 1000 / best.requests]]
    for hop, seconds in hop_cpu.items():
        if hop != "client":
            rows.append([hop, seconds * 1000 / best.requests])
    rows.append(["  of which the model at batch 32 (bare loop)", model_ms])
    print(table(["hop", "CPU ms/request"], rows))
    half = best.rps / 2
    second_version(site, scale)
    loop = open_loop(site, body, headers, half).start()
    try:
        time.sleep(scale.seconds)
        latency = [a.latency_ms for a in loop.answers if a.status == 200]
        p50, p99 = float(np.percentile(latency, 50)), float(np.percentile(latency, 99))
        time.sleep(REPORT_LAG_S)  # (the ingress's figures of those seconds, handed over)
        measured = measured_latency(site.client, "bench", scale.seconds)
        swapped = swaps(site, loop, scale.swaps)
        shared = canary(site, loop, scale.canary_requests)
        writer = samples_after_writer_kill(site, loop, scale.seconds)
        crash = control_plane_crash(site, loop, scale.seconds)
    finally:
        answers = loop.stop()
    gen_share = loop.cpu_s / (max(1e-9, answers[-1].scheduled - answers[0].scheduled) * cores)
    tagged = _tagged(answers)
    print(f"half rate {half:.1f}/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms (p99/p50 "
          f"{p99 / p50:.2f}); the generator used {gen_share:.1%} of the cores")  # fmt: skip
    print(f"the data plane's own figures of that load: at its ingress p50 "
          f"{measured['proxy_p50_ms']:.1f} ms, p95 {measured['proxy_p95_ms']:.1f}, p99 "
          f"{measured['proxy_p99_ms']:.1f} ({measured['proxy_covered']:.0%} of the span "
          f"covered); inside the replicas p50 {measured['replica_p50_ms']:.1f} ms, p95 "
          f"{measured['replica_p95_ms']:.1f}, p99 {measured['replica_p99_ms']:.1f}")  # fmt: skip
    print(f"swaps: {swapped}\ncanary: {shared}\nsample writer killed: {writer}\n"
          f"API and manager killed: {crash}")  # fmt: skip
    ok = oip_client(site, images)
    ingress_ms = ingress_hop(site, body, headers, scale.hop_pairs)
    # The measured deployment's replica reserved every core; it is stopped so that the
    # trigger-lag deployment's replica can be placed.
    site.client.post("/v1/deployments/bench/stop", None)
    lag = trigger_lag(site, scale is SCALES.quick)
    print(f"trigger: {lag}")
    return {
        "rps_ratio": best.rps / b32,
        "onnx_vs_torchscript": bare["onnx_b32"] / bare["torchscript_b32"],
        "rps_vs_unbatched": best.rps / b1,
        "p50_ms": p50,
        "p99_ms": p99,
        "proxy_p50_ms": measured["proxy_p50_ms"],
        "proxy_p99_ms": measured["proxy_p99_ms"],
        "replica_p50_ms": measured["replica_p50_ms"],
        "replica_p99_ms": measured["replica_p99_ms"],
        "swaps": swapped["swaps"],
        "failed_during_swaps": swapped["failed"],
        "canary_share_err": shared["err"],
        "version_tagged_frac": tagged,
        "samples_lost": writer["lost"],
        "dataplane_avail_cp_crash": crash["availability"],
        "trigger_lag_windows": lag["lag_windows"] if lag["lag_windows"] is not None else -1,
        "oip_client_ok": int(ok),
        "ingress_added_ms": ingress_ms[0],
        "ingress_added_ready_ms": ingress_ms[1],
    }


def _tagged(answers: list[Reply]) -> float:
    ok = [a for a in answers if a.status == 200]
    return sum(a.version in {"1", "2"} for a in ok) / max(1, len(ok))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--restart" in argv:  # the restart under load, with its own options
        from deepedge.bench.serving_restart import main as restart

        return restart([a for a in argv if a != "--restart"])
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.serving")
    parser.add_argument("--quick", action="store_true", help="the digits CNN, short phases")
    parser.add_argument("--seconds", type=float, default=None, help="each load phase")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="run in this folder and keep it (the service's data and logs)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    values = run(args)
    print(result_line(values))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
