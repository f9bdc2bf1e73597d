"""The data plane's restart under load: ``python -m deepedge.bench.serving --restart
[--quick] [--stress-cpu N] [--bound-s S] [--keep DIR]``.

One real service on loopback with its data plane (as ``bench.serving`` starts it: the
bench harness's site), a deployment of the site's digits CNN served by one replica per
core, and an inference key. Then, in order:

1. traffic: an open loop of camera requests (``rate`` per second) for ``traffic_s``; it
   runs on through every later step;
2. load: ``stress-ng --cpu N`` beside the service (none with ``--quick``), for
   ``load_lead_s`` before the kill;
3. ``kill -9`` of the whole service tree (supervisor, API, manager, the data plane's host
   with its Ray head, raylet, workers and HAProxy: every process it started,
   :meth:`~deepedge.api.local_server.ServerProcess.kill9_tree`), then a restart on the
   same data folder and ports;
4. polls, from the kill on: the inference endpoint (the open loop), the deployment's
   traffic answer (``GET /v1/deployments/NAME/traffic``: its ``data_plane_health``) and
   the Open Inference Protocol's ``GET /v2/health/ready``, every ``poll_s``, until the
   first 200 and health saying serving, or ``bound_s`` after the restart.

What each health source said, and when, is judged against the requests
(:mod:`deepedge.bench.serving_restart_parts`: a source that said serving while a request
sent after it still failed was premature). The run exits 1 when nothing was answered 200
within ``bound_s`` of the restart (the RESULT line printed first).

Last line: ``RESULT restart_first_200_s=... api_up_s=... health_serving_s=...
health_truthful=... health_premature=... oip_ready_premature=... failed_midway_s=...
said_failed=...
said_starting=... said_retrying=... infer_5xx=... infer_other=... infer_no_answer=...
infer_5xx_after=... health_5xx=... killed=... survivors=... stress_cpu=...
within_target=...`` (``restart_first_200_s``: inf when none; ``within_target``: the first
200 within ``target_s``, 120 s).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from deepedge.api.local_server import ServerProcess
from deepedge.bench.harness.cameras import camera_request
from deepedge.bench.harness.http import InferenceKey, bearer
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.scale import Scale, Sizes
from deepedge.bench.harness.site import Tenant, start_deployment_site
from deepedge.bench.serving_load import OpenLoop
from deepedge.bench.serving_restart_parts import Attempt, RestartVerdict, Sighting, judge
from deepedge.controlplane.data_plane_health import DataPlaneState
from deepedge.core.errors import DependencyUnavailableError

log = logging.getLogger(__name__)

TOKEN = "tok-restart"
DEPLOYMENT = "bench"


@dataclass(frozen=True)
class RestartScale(Scale):
    stress_cpu: int  # stress-ng --cpu workers beside the service (0: none)
    rate: float  # camera requests per second, from before the kill to the end
    traffic_s: float  # served traffic before the load starts
    load_lead_s: float  # the load alone before the kill
    bound_s: float  # restart -> first 200 at most, else the run fails
    target_s: float  # the requirement's bound on restart -> first 200
    poll_s: float  # health polled this often
    settle_s: float  # polls kept on after the first 200 and health's serving


SCALES = Sizes(
    full=RestartScale(stress_cpu=4, rate=10.0, traffic_s=10.0, load_lead_s=5.0,
                      bound_s=300.0, target_s=120.0, poll_s=0.5, settle_s=5.0),
    quick=RestartScale(stress_cpu=0, rate=10.0, traffic_s=3.0, load_lead_s=0.0,
                       bound_s=300.0, target_s=120.0, poll_s=0.5, settle_s=2.0),
)  # fmt: skip


def deployment_spec() -> dict[str, Any]:
    """The digits deployment ``bench.serving --quick`` measures (its canary left out)."""
    cores = os.cpu_count() or 1
    return {"name": DEPLOYMENT, "workload": "digits", "labeller": "ground-truth",
            "window_s": 5.0, "base_windows": 1, "base_epochs": 1,
            "trigger": {"sample_count": None, "accuracy_threshold": 0.0,
                        "cooldown_windows": 1000},
            "serving": {"replicas": cores, "cpus": 1.0, "max_batch_size": 32,
                        "batch_wait_ms": 10.0, "sample_fraction": 0.1}}  # fmt: skip


@dataclass
class HealthWatch:
    """Polls, in a thread, the deployment's traffic answer and the data plane's
    ``/v2/health/ready``; every answer is kept as a :class:`Sighting` (monotonic seconds)."""

    api_url: str
    ready_url: str
    poll_s: float
    traffic: list[Sighting] = field(default_factory=list)
    oip: list[Sighting] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> HealthWatch:
        self._thread = threading.Thread(target=self._run, daemon=True, name="health-watch")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        route = f"{self.api_url}/v1/deployments/{DEPLOYMENT}/traffic?span_s=5"
        with httpx.Client(timeout=5.0, trust_env=False) as http:
            while not self._stop.is_set():
                self.traffic.append(_traffic_sighting(http, route))
                self.oip.append(_oip_sighting(http, self.ready_url))
                self._stop.wait(self.poll_s)


def _traffic_sighting(http: httpx.Client, route: str) -> Sighting:
    at = time.monotonic()
    try:
        answer = http.get(route, headers=bearer(TOKEN))
    except httpx.HTTPError:
        return Sighting(at, 0)
    if answer.status_code != 200:
        return Sighting(at, answer.status_code)
    health = answer.json().get("data_plane_health", {})
    with contextlib.suppress(ValueError):
        return Sighting(at, 200, DataPlaneState(health.get("state")), str(health.get("reason")))
    return Sighting(at, 200)


def _oip_sighting(http: httpx.Client, url: str) -> Sighting:
    at = time.monotonic()
    try:
        answer = http.get(url)
    except httpx.HTTPError:
        return Sighting(at, 0)
    with contextlib.suppress(ValueError):
        if answer.status_code == 200 and answer.json().get("ready") is True:
            return Sighting(at, 200, DataPlaneState.SERVING)
    return Sighting(at, answer.status_code)


@contextlib.contextmanager
def cpu_load(workers: int, limit_s: float) -> Any:
    """``stress-ng --cpu workers`` (its own process group, ended with it; at most
    ``limit_s``) while the block runs; nothing when ``workers`` is 0."""
    if workers <= 0:
        yield None
        return
    binary = shutil.which("stress-ng")
    if binary is None:
        raise DependencyUnavailableError("stress-ng is not installed (make system-deps)")
    proc = subprocess.Popen([binary, "--cpu", str(workers), "--timeout", f"{limit_s:.0f}s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def survivors(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (not zombies)."""
    alive = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


@dataclass(frozen=True)
class Restart:
    """What one restart showed: the verdicts of both health sources and its counts."""

    traffic: RestartVerdict
    oip: RestartVerdict
    api_up_s: float
    killed: int
    survivors: int
    health_5xx: int
    statuses: dict[int, int]  # the answers other than 200 after the kill, by status
    served_before: int  # 200s before the kill
    failed_before: int  # not 200 before the kill
    kill_s: float  # the kill itself (every process stopped, killed, gone)
    sent_during_kill: int  # requests sent meanwhile (counted neither before nor after)
    load_at_kill: float
    load_at_end: float


def restart_under_load(server: ServerProcess, key: InferenceKey, scale: RestartScale) -> Restart:
    """Steps 1-4 of the module docstring on a serving site."""
    body, headers, _ = camera_request("digits")
    loop = OpenLoop(key.endpoint + "/infer", body, {**headers, **key.auth()}, scale.rate,
                    timeout_s=10.0).start()  # fmt: skip
    watch = HealthWatch(server.url, f"{key.base_url}/v2/health/ready", scale.poll_s).start()
    limit_s = scale.load_lead_s + 2 * scale.bound_s
    try:
        time.sleep(scale.traffic_s)
        with cpu_load(scale.stress_cpu, limit_s):
            time.sleep(scale.load_lead_s)
            load_at_kill = os.getloadavg()[0]
            killing_at = time.monotonic()
            killed = server.kill9_tree()
            kill_at = time.monotonic()  # every process gone (answers before are the old tree's)
            left = survivors(killed)
            print(f"kill -9 of the service tree: {len(killed)} processes, {len(left)} left",
                  flush=True)  # fmt: skip
            restart_at = time.monotonic()
            api_up_s = server.start(timeout_s=scale.bound_s)
            print(f"the API answers {api_up_s:.1f} s after the restart", flush=True)
            deadline = restart_at + scale.bound_s
            while time.monotonic() < deadline and not _settled(loop, watch, restart_at):
                time.sleep(scale.poll_s)
            time.sleep(scale.settle_s)
            load_at_end = os.getloadavg()[0]
    finally:
        watch.stop()
        answers = loop.stop()
    before = [a for a in answers if a.scheduled < killing_at]
    during = [a for a in answers if killing_at <= a.scheduled < kill_at]
    attempts = [Attempt(a.scheduled - restart_at, a.scheduled + a.latency_ms / 1000 - restart_at,
                        a.status) for a in answers if a.scheduled >= kill_at]  # fmt: skip

    def after_kill(sightings: list[Sighting]) -> list[Sighting]:
        return [Sighting(s.at_s - restart_at, s.http_status, s.state, s.reason)
                for s in sightings if s.at_s >= kill_at]  # fmt: skip

    traffic = after_kill(watch.traffic)
    return Restart(
        traffic=judge(traffic, attempts), oip=judge(after_kill(watch.oip), attempts),
        api_up_s=api_up_s, killed=len(killed), survivors=len(left),
        health_5xx=sum(500 <= s.http_status < 600 for s in traffic),
        statuses=dict(sorted(Counter(a.status for a in attempts if a.status != 200).items())),
        served_before=sum(a.status == 200 for a in before),
        failed_before=sum(a.status != 200 for a in before),
        kill_s=kill_at - killing_at,
        sent_during_kill=len(during),
        load_at_kill=load_at_kill, load_at_end=load_at_end,
    )  # fmt: skip


def _settled(loop: OpenLoop, watch: HealthWatch, restart_at: float) -> bool:
    """A 200 answered to a request sent after the restart, and health saying serving."""
    served = any(a.status == 200 and a.scheduled >= restart_at for a in list(loop.answers))
    return served and any(s.serving and s.at_s >= restart_at for s in list(watch.traffic))


def _reasons(reasons: tuple[str, ...], shown: int = 3) -> str:
    more = f" (and {len(reasons) - shown} more)" if len(reasons) > shown else ""
    return " / ".join(r[:100] for r in reasons[:shown]) + more


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(restart: Restart, scale: RestartScale) -> dict[str, float | int]:
    """The tables printed, and the RESULT line's values."""
    verdict = restart.traffic
    rows = [[span.label, f"{span.first_s:.1f}", f"{span.last_s:.1f}", _reasons(span.reasons)]
            for span in verdict.spans]  # fmt: skip
    print("the deployment's traffic answer (data_plane_health), seconds since the restart:")
    print(table(["state", "from_s", "to_s", "reason"], rows))
    print("the data plane's /v2/health/ready:")
    print(table(["answer", "from_s", "to_s"], [[s.label, f"{s.first_s:.1f}", f"{s.last_s:.1f}"]
                                                for s in restart.oip.spans]))  # fmt: skip
    fails, after = verdict.before_200, verdict.after_200
    print(f"first 200 {_fmt(verdict.first_200_s)} s after the restart; health said serving "
          f"at {_fmt(verdict.first_serving_s)} s; before the first 200: {fails.http_5xx} 5xx, "
          f"{fails.other_status} other, {fails.no_answer} unanswered; after it: "
          f"{after.http_5xx} 5xx, {after.other_status} other, {after.no_answer} unanswered "
          f"(after the kill, by status, 0 unanswered: {restart.statuses}); "
          f"before the kill: {restart.served_before} answered 200, {restart.failed_before} "
          f"not; {restart.sent_during_kill} sent during the kill ({restart.kill_s:.1f} s); "
          f"load average {restart.load_at_kill:.1f} at the kill, "
          f"{restart.load_at_end:.1f} at the end")  # fmt: skip
    first, serving = verdict.first_200_s, verdict.first_serving_s
    return {
        "restart_first_200_s": float("inf") if first is None else round(first, 2),
        "api_up_s": round(restart.api_up_s, 2),
        "health_serving_s": -1.0 if serving is None else round(serving, 2),
        "health_truthful": int(verdict.truthful),
        "health_premature": verdict.premature,
        "oip_ready_premature": restart.oip.premature,
        "failed_midway_s": round(verdict.failed_midway_s, 1),
        "said_failed": int(verdict.said(DataPlaneState.FAILED)),
        "said_starting": int(verdict.said(DataPlaneState.STARTING)),
        "said_retrying": int(verdict.said(DataPlaneState.RETRYING)),
        "infer_5xx": fails.http_5xx,
        "infer_other": fails.other_status,
        "infer_no_answer": fails.no_answer,
        "infer_5xx_after": after.http_5xx,
        "health_5xx": restart.health_5xx,
        "killed": restart.killed,
        "survivors": restart.survivors,
        "stress_cpu": scale.stress_cpu,
        "within_target": int(first is not None and first <= scale.target_s),
    }


def _data_plane_log(data_dir: Path, lines: int = 30) -> str:
    """The service log's lines about the data plane (what its host said), the last ones."""
    with contextlib.suppress(OSError):
        text = (data_dir / "server.log").read_text(errors="replace").splitlines()
        said = [line for line in text if "data plane" in line or "Ray" in line]
        return "\n".join(said[-lines:])
    return ""


def run(args: argparse.Namespace) -> tuple[dict[str, float | int], bool]:
    """The values of the RESULT line, and whether the data plane served within the bound."""
    scale = SCALES.pick(args.quick)
    changes = {k: v for k, v in (("stress_cpu", args.stress_cpu), ("bound_s", args.bound_s))
               if v is not None}  # fmt: skip
    scale = scale.but(**changes)
    print(f"machine: {machine_description()}; stress-ng --cpu {scale.stress_cpu}", flush=True)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.nullcontext(str(args.keep)) if args.keep is not None
        else tempfile.TemporaryDirectory(prefix="deepedge-bench-restart-")
    ) as tmp:  # fmt: skip
        started = time.monotonic()
        site = start_deployment_site(Path(tmp), Tenant("bench", TOKEN), deployment_spec())
        site.client.close()  # the restart watches the service with clients of its own
        server, key = site.server, site.key
        print(f"service and data plane up, first version served: "
              f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
        try:
            restart = restart_under_load(server, key, scale)
        finally:
            server.stop()
            server.kill9_tree()  # anything a stop left behind
        values = report(restart, scale)
        served = restart.traffic.first_200_s is not None
        if not served:
            print(f"FAILED: nothing answered 200 within {scale.bound_s:.0f} s of the restart; "
                  f"the data plane's host said (server.log):\n"
                  f"{_data_plane_log(server.settings.data_dir)}", file=sys.stderr)  # fmt: skip
    return values, served


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.serving --restart")
    parser.add_argument("--quick", action="store_true", help="no stress-ng, shorter phases")
    parser.add_argument("--stress-cpu", type=int, default=None, help="stress-ng --cpu N")
    parser.add_argument(
        "--bound-s",
        type=float,
        default=None,
        help="fail when nothing is answered 200 this long after the restart",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="run in this folder and keep it (the service's data and logs)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    values, served = run(args)
    print(result_line(values), flush=True)
    if not served:
        sys.exit(1)


if __name__ == "__main__":
    main()
