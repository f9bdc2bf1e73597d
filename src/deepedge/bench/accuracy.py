"""Served accuracy over time on a real site: ``python -m deepedge.bench.accuracy``.

A real site (``python -m deepedge.api.server --data-plane``: the service, its control loop
and its data plane on an embedded Ray head), one deployment, and a camera
(:func:`~deepedge.dataplane.camera.run_camera`) sending one image per request at 60
requests/s. The camera keeps every true label; none is sent back for the digits (their
deployment's labeller is the golden model). The stream follows a drift trace
(:func:`~deepedge.learning.scheduled_stream.drift_trace`) of four segments of 24 windows of
5 s: the first condition (what the first version learned: the stream's base windows), an
abrupt drift, a gradual drift over 6 windows to a third condition, and the first condition
again. The deployment's policies are the product's defaults but for the window length,
the stream and the replicas (the digits: the demo's half core; the ResNet:
``bench.serving``'s single-threaded replica per core).

Beside what the site served, two references on the very requests the camera sent, with
their true labels, computed in the benchmark's process after the run:

* **no update**: version 1 (downloaded through the API) scored on every window;
* **offline reference**: per segment, version 1 warm-started and trained offline on that
  segment's labelled data, serving from the segment's first window: as many labelled
  samples as the camera sent in the segment (for the ResNet, 64 of each window), drawn
  afresh from the same windows (their scenes, class mix and image pool; other samples,
  jitter and noise), so that it is scored on requests it has not seen, as the site's own
  updates are. (Trained on the very requests it is scored on, it scored 1.000 on the
  first condition where the first version scored 0.931: a memorised reference.)

Runs (``--parts``, default all): ``main`` (digits), ``budget`` (digits, every served
request sampled and labelled: ``label_budget_drop``), ``loaded`` (digits beside
``stress-ng --cpu 4``: ``update_p95_loaded_s``) and ``resnet`` (the ``resnet-photos``
workload on a scheduled photo stream, its labels-present labeller fed by the camera's
feedback on the label fraction of the sampled requests: the nearest equivalent of a golden
labeller it has). ``--quick``: ``main`` only, on a short trace of short windows.

The measures are :mod:`deepedge.bench.accuracy_parts`'s. ``--out DIR`` keeps the series
(``accuracy.json``), a plot per workload (``accuracy-<workload>.png``) and the models.
Last line: ``RESULT acc_ratio=... recovery_s=... recovery_windows_recurring=...
wrong_decisions=... decisions=... update_p50_s=... update_p95_loaded_s=... labels_frac=...
label_budget_drop=... gain_vs_no_update=... acc_ratio_resnet=... updates_failed_loaded=...``
(nan: that run was not made).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import logging
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from deepedge.bench.accuracy_parts import (
    BASE_WINDOWS,
    Measured,
    Request,
    SiteRun,
    TraceSettings,
    Window,
    Workload,
    measure,
    window_starts,
)
from deepedge.bench.harness.http import Client
from deepedge.bench.harness.report import machine_description, result_line
from deepedge.bench.harness.scale import Sizes
from deepedge.bench.harness.site import (
    Tenant,
    make_tenants,
    served_key,
    site_settings,
    start_service,
)
from deepedge.learning.scheduled_stream import SEGMENTS, DriftTrace

log = logging.getLogger(__name__)

TOKEN = "tok-accuracy"
SEED = 0
PARTS = ("main", "budget", "loaded", "resnet")


SCALES = Sizes(
    full=TraceSettings(window_s=5.0, segment_windows=24, ramp_windows=6),
    quick=TraceSettings(window_s=3.0, segment_windows=4, ramp_windows=2),
)


# -- the workloads --------------------------------------------------------------------------


def digits(settings: TraceSettings, label_all: bool = False) -> Workload:
    spec: dict[str, Any] = {
        "name": "digits",
        "labeller": "golden-model",
        "window_s": settings.window_s,
        "base_windows": BASE_WINDOWS,
        # The deployment's own stream is only its base windows (the first condition); the
        # camera sends the scheduled stream of the same seed (learning/scheduled_stream).
        "stream": {"seed": SEED, "window_size": settings.per_window, "onset_window": 10_000,
                   "ramp_windows": 1},
        "serving": {"cpus": 0.5, "max_batch_size": 16},
    }  # fmt: skip
    if label_all:
        spec["update"] = {"label_fraction": 1.0}
        spec["serving"] |= {"sample_fraction": 1.0, "retention": {"max_samples": 1_000_000}}
    return Workload("digits", spec, feedback=0.0, reference_epochs=8, reference_per_window=None)


def resnet(settings: TraceSettings) -> Workload:
    from deepedge.workload.bundled import BUNDLED

    document = copy.deepcopy(BUNDLED["resnet-photos"])
    document["data"] = {
        "kind": "stream",
        "entry_point": "deepedge.learning.photo_stream:make_scheduled_photo_stream",
        "kwargs": {"scenes": list(settings.trace().scenes), "seed": SEED,
                   "window_size": settings.per_window, "eval_size": 8, "image_size": 64},
    }  # fmt: skip
    spec = {
        "name": "photos",
        "workload": document,
        "window_s": settings.window_s,
        "base_windows": BASE_WINDOWS,
        # bench.serving's shape (one single-threaded replica per core): with one replica
        # the camera fell 139 s behind its schedule (answers queued, 64 in flight)
        "serving": {"replicas": 2, "cpus": 1.0, "max_batch_size": 32, "batch_wait_ms": 10.0},
    }
    # labels-present: its labels reach live traffic as feedback, on the share the digits'
    # golden labeller labels (update.label_fraction of the sampled requests, default 0.5)
    return Workload("resnet-photos", spec, feedback=0.5, reference_epochs=2,
                    reference_per_window=64)  # fmt: skip


FRESH_OFFSET = 100_000  # the reference's draws: the same scenes, windows this far on


def stream_source(
    workload: Workload, settings: TraceSettings, fresh: bool = False
) -> Callable[[int], Window]:
    """``window(t) -> (images, labels)`` of stream window ``t`` as the camera sends it;
    ``fresh``: another draw of the same window (its scene, class mix and pool; other
    samples, jitter and noise: the stream's window ``t + FRESH_OFFSET`` on a schedule
    shifted as far), what the offline reference trains on."""
    offset = FRESH_OFFSET if fresh else 0
    scenes = (0.0,) * offset + settings.trace().scenes
    if workload.name == "digits":
        from deepedge.learning.scheduled_stream import ScheduledStream
        from deepedge.learning.stream import DriftConfig, load_digits_images

        stream = ScheduledStream(
            load_digits_images(16),
            DriftConfig(seed=SEED, window_size=settings.per_window, eval_size=1),
            scenes,
        )

        def digit_window(t: int) -> Window:
            w = stream.window(t + offset)
            return w.images, w.labels

        return digit_window
    from deepedge.workload.resolve import load_workload

    document = copy.deepcopy(workload.spec["workload"])
    document["data"]["kwargs"]["scenes"] = list(scenes)
    loaded = load_workload(document)

    def workload_window(t: int) -> Window:
        data = loaded.window(t + offset)
        return data.images, data.labels

    return workload_window


# -- one site run ---------------------------------------------------------------------------


def run_site(
    part: str, workload: Workload, settings: TraceSettings, root: Path, stress: bool,
    timeout_s: float,
) -> SiteRun:  # fmt: skip
    """The trace on a fresh site (module docstring); ``stress``: ``stress-ng --cpu 4``
    beside it from the first version's endpoint to the trace's end."""
    from deepedge.dataplane.camera import CameraConfig, run_camera
    from deepedge.profiling.stressors import StressLevel, Stressor

    run = SiteRun(part, workload, settings)
    data = root / "data"
    service = site_settings(data)
    make_tenants(service, [Tenant("bench", TOKEN, quota={"max_active_jobs": 2, "max_cores": 8.0})])
    started = time.monotonic()
    server = start_service(service, timeout_s=180)
    client = Client(server.url, TOKEN)
    name = workload.spec["name"]
    stressor = Stressor(StressLevel(cpu_load=1.0), cores=4) if stress else None
    try:
        created = client.post("/v1/deployments", workload.spec)
        try:
            key = served_key(client, name, timeout_s, body={"name": "camera"})
        except RuntimeError as e:
            raise RuntimeError(f"{name} never served; see {data / 'server.log'}") from e
        run.startup_s = time.monotonic() - started
        run.models[1] = _download(client, name, 1, root / "models")
        source = stream_source(workload, settings)
        trace = settings.trace()
        config = CameraConfig(key.base_url, key.model, key.key,
                              rate=settings.rate, window_s=settings.window_s,
                              windows=trace.windows, first_window=trace.lead_windows,
                              feedback=workload.feedback, keep_answers=True)  # fmt: skip
        print(f"{part}: {name} serves v1 {run.startup_s:.0f} s after the service started; "
              f"the camera sends {trace.windows} windows of {settings.window_s:g} s"
              + (" beside stress-ng --cpu 4" if stress else ""), flush=True)  # fmt: skip
        if stressor is not None:
            stressor.start()
        began = time.time()
        reports = asyncio.run(run_camera(config, source, _progress(part, trace)))
        for report in reports:
            w = report.window - trace.lead_windows
            run.sent.append(report.sent)
            run.failed.append(report.failed)
            run.requests += [Request(w, a.index, a.label, a.predicted, int(a.version), a.at,
                                     a.sent_at)
                             for a in report.answers if a.version.isdigit()]  # fmt: skip
        run.starts = window_starts(
            run.requests, [began + w * settings.window_s for w in range(trace.windows)]
        )
        if stressor is not None:
            stressor.stop()
        _collect(run, client, name, root / "models")
        run.labels, run.evicted = _stored_labels(data, created["id"])
    finally:
        if stressor is not None:
            stressor.stop()
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            _halt_jobs(client)
        client.close()
        server.stop()
    return run


def _collect(run: SiteRun, client: Client, name: str, models: Path) -> None:
    """The deployment's events, the loop's windows and every version's model (a version
    still training has none yet)."""
    run.events = list(client.get(f"/v1/deployments/{name}/events?limit=5000")["events"])
    run.loop_windows = list(client.get(f"/v1/deployments/{name}/windows?limit=5000")["windows"])
    for v in client.get(f"/v1/deployments/{name}/versions")["versions"]:
        if v["version"] not in run.models:
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                run.models[v["version"]] = _download(client, name, v["version"], models)


def _download(client: Client, name: str, version: int, folder: Path) -> Path:
    answer = client.http.get(f"/v1/deployments/{name}/versions/{version}/model")
    if answer.status_code != 200:
        raise RuntimeError(f"v{version} of {name}: {answer.status_code}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-v{version}.pt"
    path.write_bytes(answer.content)
    return path


def _stored_labels(data: Path, deployment_id: str) -> tuple[dict[str, int], int]:
    from deepedge.dataplane.sample_store import SampleStore, sample_store_path

    store = SampleStore(sample_store_path(data))
    try:
        return store.label_sources(deployment_id), store.usage(deployment_id).evicted
    finally:
        store.close()


def _halt_jobs(client: Client) -> None:
    """Halt the update jobs still running (their learners outlive a stopped service)."""
    live = {"QUEUED", "PENDING", "DEPLOYING", "PROCESSING", "RESTARTED"}
    for job in client.get("/v1/jobs?limit=500")["jobs"]:
        if job["status"] in live:
            client.post(f"/v1/jobs/{job['id']}/halt", {})


def _progress(part: str, trace: DriftTrace) -> Callable[[Any], None]:
    def say(report: Any) -> None:
        w = report.window - trace.lead_windows
        acc = "-" if report.accuracy is None else f"{report.accuracy:.3f}"
        versions = ", ".join(f"v{v} {n}" for v, n in sorted(report.by_version.items()))
        print(f"  {part} window {w:>3} ({SEGMENTS[trace.segment_of(w)]}, scene "
              f"{trace.scene(w):+.2f}): {report.answered}/{report.sent} answered, accuracy "
              f"{acc}, by {versions or 'none'}", flush=True)  # fmt: skip

    return say


# -- the run --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, float]:
    from deepedge.bench.accuracy_report import render, write_record

    settings = SCALES.pick(args.quick)
    parts = ["main"] if args.quick else [p for p in PARTS if p in args.parts]
    root = Path(tempfile.mkdtemp(prefix="deepedge-accuracy-"))
    print(f"machine: {machine_description()}; trace: 4 segments of {settings.segment_windows} "
          f"windows of {settings.window_s:g} s, {settings.rate:g} requests/s; parts "
          f"{', '.join(parts)}; data {root}", flush=True)  # fmt: skip
    measured: dict[str, Measured] = {}
    for part in parts:
        workload = (resnet(settings) if part == "resnet"
                    else digits(settings, label_all=part == "budget"))  # fmt: skip
        try:
            site = run_site(part, workload, settings, root / part, stress=part == "loaded",
                            timeout_s=args.timeout_s)  # fmt: skip
            measured[part] = measure(site, stream_source(workload, settings),
                                     stream_source(workload, settings, fresh=True))  # fmt: skip
        except Exception as exc:  # the other runs still count; this one's figures are nan
            log.exception("the %s run failed", part)
            print(f"{part}: the run failed ({type(exc).__name__}: {exc}); its figures are nan",
                  flush=True)  # fmt: skip
            continue
        print(render(measured[part]), flush=True)
        if args.out is not None:
            write_record(args.out, measured)
    if not args.keep_data:
        shutil.rmtree(root, ignore_errors=True)
    return result(measured)


def result(measured: dict[str, Measured]) -> dict[str, float]:
    """The RESULT line's figures (nan: the run they come from was not made)."""
    nan = math.nan

    def of(part: str, key: str) -> float:
        return measured[part].figures[key] if part in measured else nan

    budget_drop = of("budget", "acc_ratio") - of("main", "acc_ratio")
    return {
        "acc_ratio": of("main", "acc_ratio"),
        "recovery_s": of("main", "recovery_s"),
        "recovery_windows_recurring": of("main", "recovery_windows_recurring"),
        "wrong_decisions": of("main", "wrong_decisions"),
        "decisions": of("main", "decisions"),
        "update_p50_s": of("main", "update_p50_s"),
        "update_p95_loaded_s": of("loaded", "update_p95_s"),
        "labels_frac": of("main", "labels_frac"),
        "label_budget_drop": budget_drop,
        "gain_vs_no_update": of("main", "gain_vs_no_update"),
        "acc_ratio_resnet": of("resnet", "acc_ratio"),
        "updates_failed_loaded": of("loaded", "updates_failed"),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.accuracy",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="the main run only, on a short trace of short windows")  # fmt: skip
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="which site runs to make (default: all)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="write accuracy.json, the plots and the models here")  # fmt: skip
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the sites' data folders (printed at the start)")  # fmt: skip
    parser.add_argument("--timeout-s", type=float, default=900.0,
                        help="longest wait for a site's first version")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    values = run(args)
    print(result_line(values))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
