"""Time to recover: a ``model-update`` job from its submission to its results written.

``python -m deepedge.bench.update_job [--quick] [--jobs N] [--executor auto|ray|threads]
[--stress-cpus K]`` starts a real job service on loopback (``api.local_server``: sandboxed
learners where bubblewrap is there), and submits, one after the other, ``N`` jobs of the
size the control loop submits: the digits (16 x 16) with the edge CNN, ``--samples``
labelled samples to train on, at most ``--epochs`` epochs, on the emulated testbed's nodes
at host speed (``time_scale`` 0, the deployments' default), niced 5 with the loop's
resources. For each job it measures, on the host's wall clock:

* ``to_result_s``: the acknowledged ``POST /v1/jobs`` (timed from just before it was sent)
  to the learner's ``result.json`` landing in the job's results (its modification time);
* ``to_completed_s``: to the service reporting the job ``COMPLETED`` (polled every 0.2 s);

and reads back from the result which executor ran and the learner's phases
(:func:`deepedge.controlplane.update_jobs.update_phases`; none from a deepedge that did not
record them). With ``--stress-cpus K`` a ``stress-ng --cpu K`` runs beside the service for
the whole run (the site benchmark's loaded case). The bundled digits are read in the job
(as a deployment's staged windows would be), so the figure includes that read.

Last line: ``RESULT median_s=... p95_s=... max_s=... failed=... on_threads=... on_ray=...``
(``to_result_s`` over the jobs; jobs that failed; jobs whose result names each executor).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deepedge.bench.harness.http import bearer
from deepedge.bench.harness.percentiles import percentile
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.site import Tenant, start_service
from deepedge.controlplane.deployment_spec import UpdateResources
from deepedge.controlplane.update_jobs import update_phases
from deepedge.controlplane.update_resources import learner_request
from deepedge.service.config import ServiceSettings

TOKEN = "update-job-bench-token"
TESTBED_NODES = ["tx2-1", "nano-1", "nano-2", "nano-3"]
POLL_S = 0.2
DONE = {"COMPLETED", "FAILED", "CANCELLED"}


@dataclass(frozen=True)
class JobTiming:
    """One job's measured times (seconds on the host's clock) and what its result said."""

    job_id: str
    status: str
    to_result_s: float | None  # submission -> result.json written (None: never written)
    to_completed_s: float
    executor: str | None = None  # as the learner recorded it (None: not recorded)
    phases_s: dict[str, float] = field(default_factory=dict)
    accuracy: float | None = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small job, for tests")
    parser.add_argument("--jobs", type=int, default=5, help="jobs, one after the other")
    parser.add_argument("--samples", type=int, default=1000, help="training samples (<= 1797)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs at most")
    parser.add_argument(
        "--executor",
        choices=["auto", "ray", "threads"],
        default=None,
        help="the job document's executor (default: leave it to the document's default)",
    )
    parser.add_argument(
        "--stress-cpus", type=int, default=0, help="run stress-ng --cpu K beside the service"
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per job")
    parser.add_argument("--out", type=Path, default=None, help="keep the service's folder here")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.samples, args.epochs = 1, 300, 2
    if not 1 <= args.jobs <= 100 or not 50 <= args.samples <= 1797 or args.epochs < 1:
        parser.error("need 1 <= --jobs <= 100, 50 <= --samples <= 1797, --epochs >= 1")
    return args


def job_manifest(
    name: str, samples: int, epochs: int, executor: str | None, seed: int
) -> dict[str, Any]:
    """A ``model-update`` manifest as the control loop writes one for a testbed deployment
    (its resources: :func:`learner_request` without a cluster; niced 5), on the bundled
    digits instead of staged windows."""
    request = learner_request(UpdateResources(), data_mb=samples * 16 * 16 * 4 / (1 << 20),
                              snapshot=None)  # fmt: skip
    document: dict[str, Any] = {
        "dataset_size": samples,
        "epochs": epochs,
        "time_scale": 0.0,
        "seed": seed,
        "nodes": TESTBED_NODES,
    }
    if executor is not None:
        document["executor"] = executor
    return {
        "name": name,
        "kind": "model-update",
        "resources": {
            "cpus": request.cpus,
            "gpus": request.gpus,
            "mem_mb": request.mem_mb,
            "nice": 5,
        },
        "checkpoint_interval_s": 30,
        "restart_limit": 2,
        "retry_limit": 2,
        "spec": {"document": document},
    }


@contextlib.contextmanager
def stress(cpus: int) -> Iterator[None]:
    """``stress-ng --cpu cpus`` for the block (nothing when ``cpus`` is 0)."""
    if cpus <= 0:
        yield
        return
    if shutil.which("stress-ng") is None:
        raise SystemExit("stress-ng is not installed (apt-get install -y stress-ng)")
    proc = subprocess.Popen(
        ["stress-ng", "--cpu", str(cpus), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        time.sleep(1.0)  # its workers running before the first job
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _result_file(data_dir: Path, job_id: str) -> Path | None:
    found = list((data_dir / "jobs").glob(f"*/{job_id}/results/result.json"))
    return found[0] if found else None


def run_job(
    client: httpx.Client, data_dir: Path, manifest: dict[str, Any], timeout_s: float
) -> JobTiming:
    """Submit ``manifest``, wait for the job to end; its timing (module docstring)."""
    submitted = time.time()
    answer = client.post("/v1/jobs", json=manifest)
    answer.raise_for_status()
    job_id = str(answer.json()["id"])
    status = ""
    while time.time() - submitted < timeout_s:
        status = str(client.get(f"/v1/jobs/{job_id}").json()["status"])
        if status in DONE:
            break
        time.sleep(POLL_S)
    completed = time.time()
    path = _result_file(data_dir, job_id)
    to_result = path.stat().st_mtime - submitted if path is not None else None
    result: dict[str, Any] = {}
    if status == "COMPLETED":
        result = client.get(f"/v1/jobs/{job_id}/result").json()
    return JobTiming(
        job_id,
        status or "UNKNOWN",
        to_result,
        completed - submitted,
        result.get("executor"),
        update_phases(result),
        result.get("final_accuracy"),
    )


def measure(args: argparse.Namespace, folder: Path) -> list[JobTiming]:
    settings = ServiceSettings(data_dir=folder / "service")
    tenant = Tenant("bench", TOKEN, quota={"max_active_jobs": 1, "max_cores": 4.0})
    server = start_service(settings, [tenant], timeout_s=180.0)
    timings: list[JobTiming] = []
    try:
        with (
            stress(args.stress_cpus),
            httpx.Client(base_url=server.url, timeout=60.0, trust_env=False,
                         headers=bearer(TOKEN)) as client,
        ):  # fmt: skip
            for n in range(args.jobs):
                manifest = job_manifest(f"update-{n}", args.samples, args.epochs,
                                        args.executor, seed=n)  # fmt: skip
                timings.append(run_job(client, settings.data_dir, manifest, args.timeout_s))
    finally:
        server.stop()
    return timings


def render(args: argparse.Namespace, timings: list[JobTiming]) -> str:
    phases = sorted({p for t in timings for p in t.phases_s})
    rows = [
        [t.job_id[:8], t.status, t.to_result_s, t.to_completed_s, t.executor or "-",
         *(t.phases_s.get(p) for p in phases), t.accuracy]
        for t in timings
    ]  # fmt: skip
    done = [t.to_result_s for t in timings if t.to_result_s is not None]
    lines = [
        f"model-update jobs through the job service: {args.samples} digits (16x16), "
        f"<= {args.epochs} epochs, emulated testbed at host speed, nice 5"
        + (f"; stress-ng --cpu {args.stress_cpus} beside it" if args.stress_cpus else ""),
        f"machine: {machine_description()}",
        table(
            [
                "job",
                "status",
                "to_result_s",
                "to_completed_s",
                "executor",
                *(f"{p}_s" for p in phases),
                "accuracy",
            ],
            rows,
        ),
    ]
    lines.append(
        result_line(
            {
                "median_s": statistics.median(done) if done else float("nan"),
                "p95_s": percentile(done, 95),
                "max_s": max(done) if done else float("nan"),
                "failed": sum(t.status != "COMPLETED" for t in timings),
                "on_threads": sum(t.executor == "threads" for t in timings),
                "on_ray": sum(t.executor == "ray" for t in timings),
            }
        )
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        timings = measure(args, args.out)
    else:
        with tempfile.TemporaryDirectory(prefix="deepedge-update-job-") as folder:
            timings = measure(args, Path(folder))
    print(render(args, timings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
