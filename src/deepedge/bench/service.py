"""Benchmark of the job service on a real server on loopback.

``python -m deepedge.bench.service [--quick]`` measures, in one run, each part against a
fresh service (its own data folder and store, so no part inherits another's backlog):

1. load: an open-loop stream of mixed submit (20%) / status (50%) / list (30%) requests at a
   fixed rate; latency is counted from each request's *scheduled* send time, so a stalled
   server cannot hide queueing (no coordinated omission). Afterwards every acknowledged job
   must be in the store exactly once.
2. crash: five running jobs; (a) ``kill -9`` of the serving process, which the service's
   supervisor restarts (as Kubernetes restarts a pod in the paper's measurement): time from
   the kill to the API answering = ``api_recovery_s``; (b) ``kill -9`` of the whole service
   and a fresh start: time from spawn to the API answering (cold start, reported beside it).
   After each: jobs recovered / lost / duplicated (two live learners of one job). Then one
   learner is killed with ``kill -9`` and the time until its replacement runs is measured.
3. overhead: the same training run (digits MLP epochs) through the service (the job's
   own timestamps, acknowledged submit to COMPLETED; polled every 0.5 s so that the
   measurement itself costs little) and directly as a subprocess (spawn to exit), in
   interleaved pairs (direct then service, service then direct, ...); overhead = median
   over pairs of service / direct - 1, printed with its range and every pair.
4. fuzz: schemathesis against ``/openapi.json`` plus a fuzz of malformed manifests; the
   server's own latency histogram counts every 5xx it answered.

Last line: ``RESULT p99_ms=... lost=... dup=... api_recovery_s=... learner_restart_s=...
overhead=... fuzz_5xx=...``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from deepedge.api.local_server import ServerProcess
from deepedge.bench.harness.http import bearer
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.site import Tenant, make_tenants
from deepedge.bench.service_load import (
    LOAD_TOKEN,
    LoadResult,
    all_job_ids,
    run_load,
)
from deepedge.core.errors import ConflictError
from deepedge.service.config import ServiceSettings
from deepedge.service.durable_files import read_json
from deepedge.service.manifest import parse_manifest

log = logging.getLogger(__name__)

CRASH_TOKEN, FUZZ_TOKEN, TIME_TOKEN = "tok-crash", "tok-fuzz", "tok-time"


# -- 2. crash ------------------------------------------------------------------------------


@dataclass
class CrashResult:
    api_recovery_s: float  # kill -9 of the serving process -> API answers (supervised)
    cold_start_s: float  # fresh process spawned -> API answers (whole service killed)
    recovered: int
    lost: int
    dup: int
    learner_restart_s: float
    resumed_from_checkpoint: bool


def _live_learners(job_dir: Path) -> list[int]:
    """Processes running the demo learner inside this job's directory (true duplicates)."""
    pids = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if "demo_learner" in cmd and str(proc.info["cwd"] or "").startswith(str(job_dir)):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def _wait(predicate: Any, timeout_s: float, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return False


def run_crash(server: ServerProcess, steps: int) -> CrashResult:
    settings = server.settings
    manifest = {"name": "crash", "kind": "command", "checkpoint_interval_s": 0.5,
                "resources": {"cpus": 0.2, "mem_mb": 1024},
                "spec": {"argv": [sys.executable, "-m", "deepedge.service.demo_learner",
                                  "--steps", str(steps), "--step-s", "0.1"]}}  # fmt: skip
    client = httpx.Client(base_url=server.url, headers=bearer(CRASH_TOKEN), timeout=30,
                          trust_env=False)  # fmt: skip
    jobs = [client.post("/v1/jobs", json=manifest).json() for _ in range(5)]
    ids = [j["id"] for j in jobs]

    def statuses() -> list[str]:
        return [client.get(f"/v1/jobs/{i}").json()["status"] for i in ids]

    if not _wait(lambda: all(s == "PROCESSING" for s in statuses()), 60, 0.2):
        raise RuntimeError(f"crash jobs never all ran: {statuses()}")
    tenant_dirs = list((settings.data_dir / "jobs").iterdir())
    dirs = {i: next(d / i for d in tenant_dirs if (d / i).exists()) for i in ids}
    _wait(lambda: all(any((d / "checkpoints").glob("*.ckpt")) for d in dirs.values()), 20)
    before = {i: _live_learners(d) for i, d in dirs.items()}

    def check(label: str) -> tuple[int, int, int]:
        """(recovered, lost, duplicated) after a few manager ticks of reconciliation."""
        time.sleep(1.0)
        stored = set(all_job_ids(server.url, CRASH_TOKEN))
        after = {i: _live_learners(d) for i, d in dirs.items()}
        current = statuses()
        recovered = sum(1 for i, s in zip(ids, current, strict=True)
                        if s in {"PROCESSING", "RESTARTED", "STORING", "COMPLETED"}
                        and (after[i] == before[i] or s != "PROCESSING"))  # fmt: skip
        lost = len(set(ids) - stored) + sum(1 for s in current if s == "FAILED")
        dup = sum(1 for pids in after.values() if len(pids) > 1)
        log.info("%s: statuses %s", label, current)
        return recovered, lost, dup

    # (a) the paper's measurement: kill -9 the serving process, its supervisor restarts it
    killed = time.perf_counter()
    server.kill9_serving()
    supervised_s = server.wait_healthy(killed)
    recovered_a, lost_a, dup_a = check("supervised restart")
    # (b) kill -9 the whole service (supervisor too) and start a fresh one: a cold start
    server.kill9()
    cold_s = server.start()
    client.close()
    client = httpx.Client(base_url=server.url, headers=bearer(CRASH_TOKEN), timeout=30,
                          trust_env=False)  # fmt: skip
    recovered_b, lost_b, dup_b = check("cold restart")
    recovered = min(recovered_a, recovered_b)
    lost, dup = max(lost_a, lost_b), max(dup_a, dup_b)

    victim = dirs[ids[0]]
    old = _live_learners(victim)
    killed_at = time.time()
    for pid in old:
        os.kill(pid, signal.SIGKILL)

    def replacement_started() -> float | None:
        for pid_file in (victim / "status").glob("learner-0-*.pid"):
            record = read_json(pid_file) or {}
            if record.get("learner_pid") not in old and record.get("started_at", 0) >= killed_at:
                return float(record["started_at"])
        return None

    _wait(lambda: replacement_started() is not None, 30, 0.02)
    started = replacement_started()
    learner_restart_s = (started - killed_at) if started else float("inf")
    log_path = victim / "logs" / "learner-0.log"

    def resumed_step() -> bool:
        after_restart = log_path.read_text().split("attempt 1 started")[-1]
        return bool(re.search(r"starting at step [1-9]", after_restart))

    resumed = _wait(resumed_step, 20, 0.1)
    for i in ids:
        client.post(f"/v1/jobs/{i}/halt")
    _wait(lambda: all(s == "HALTED" for s in statuses()), 30, 0.2)
    client.close()
    return CrashResult(supervised_s, cold_s, recovered, lost, dup, learner_restart_s, resumed)


# -- 3. overhead ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OverheadResult:
    """Wall times of the same run, directly and through the service, pair by pair."""

    direct_s: list[float]
    service_s: list[float]

    @property
    def ratios(self) -> list[float]:
        return [s / d - 1.0 for s, d in zip(self.service_s, self.direct_s, strict=True)]

    @property
    def overhead(self) -> float:
        """Median over pairs of ``service / direct - 1`` (pairs share the machine's load)."""
        return statistics.median(self.ratios) if self.ratios else float("nan")

    def describe(self) -> str:
        if not self.ratios:
            return "not run"
        ratios = sorted(self.ratios)
        medians = statistics.median(self.service_s) / statistics.median(self.direct_s) - 1
        return (
            f"direct median={statistics.median(self.direct_s):.2f}s service "
            f"median={statistics.median(self.service_s):.2f}s overhead median={self.overhead:.4f} "
            f"range=[{ratios[0]:.4f}, {ratios[-1]:.4f}] "
            f"medians' ratio-1={medians:.4f}"
        )

    def pair_rows(self) -> list[list[str]]:
        rows = zip(self.direct_s, self.service_s, self.ratios, strict=True)
        return [
            [str(i), "direct first" if i % 2 == 0 else "service first", f"{d:.2f}", f"{s:.2f}",
             f"{r:+.4f}"]
            for i, (d, s, r) in enumerate(rows)
        ]  # fmt: skip


def run_overhead(
    server: ServerProcess, epochs: int, pairs: int, train: bool = True
) -> OverheadResult:
    """The same learner run directly and through the service, in interleaved pairs
    (direct, service / service, direct / ...), so that slow drifts of the machine's load
    fall on both sides alike; the overhead is the median over pairs of ``service/direct-1``.
    """
    work = ["--train"] if train else ["--step-s", "0.1"]
    argv = [sys.executable, "-m", "deepedge.service.demo_learner", *work, "--steps", str(epochs)]
    manifest = {"name": "overhead", "kind": "command", "checkpoint_interval_s": 3600,
                "resources": {"cpus": 1, "mem_mb": 8192}, "spec": {"argv": argv}}  # fmt: skip
    # The same environment the service gives a learner without GPUs, so that only the
    # service itself differs between the two runs.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    direct_s: list[float] = []
    service_s: list[float] = []
    with httpx.Client(base_url=server.url, headers=bearer(TIME_TOKEN), timeout=30,
                      trust_env=False) as client:  # fmt: skip

        def direct() -> float:
            with tempfile.TemporaryDirectory() as work_dir:
                started = time.perf_counter()
                # Its own session, as the service's collector gives a learner: with the
                # kernel's autogroup scheduling a session is also a CPU-share group.
                subprocess.run(argv, cwd=work_dir, env=env, check=True,
                               stdout=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
                return time.perf_counter() - started

        def through_service() -> float:
            """Acknowledged submit to COMPLETED, from the job's own history timestamps."""
            job = client.post("/v1/jobs", json=manifest).json()
            _wait(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"]
                  in {"COMPLETED", "FAILED"}, 900, 0.5)  # fmt: skip
            history = client.get(f"/v1/jobs/{job['id']}").json()["history"]
            if history[-1]["status"] != "COMPLETED":
                raise RuntimeError(f"overhead job failed: {history[-1]}")
            return float(history[-1]["at"] - history[0]["at"])

        for pair in range(pairs):
            if pair % 2 == 0:
                direct_s.append(direct())
                service_s.append(through_service())
            else:
                service_s.append(through_service())
                direct_s.append(direct())
            log.info("overhead pair %d: direct %.2fs service %.2fs", pair, direct_s[-1],
                     service_s[-1])  # fmt: skip
    return OverheadResult(direct_s, service_s)


# -- 4. fuzz -------------------------------------------------------------------------------


def _server_5xx(url: str) -> int:
    text = httpx.get(f"{url}/metrics", trust_env=False).text
    pattern = r'deepedge_api_request_seconds_count\{[^}]*status="5\d\d"[^}]*\} ([0-9.e+]+)'
    return int(sum(float(v) for v in re.findall(pattern, text)))


def malformed_manifests(rng: random.Random, count: int) -> list[bytes]:
    """Bodies that must all be refused with a 4xx: broken JSON, wrong types, escapes."""
    valid: dict[str, Any] = {"name": "ok", "kind": "command", "spec": {"argv": ["true"]}}
    junk: list[Any] = [None, -1, 1e308, "", "x" * 5000, [], {}, [1, "a"], {"a": {"b": []}},
                       True, "../../etc/passwd", "/abs", "\u0000", "😀" * 10]  # fmt: skip
    bodies: list[bytes] = [b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"name":', b"1" * 10000]
    fields = ["name", "kind", "framework", "learners", "resources", "data",
              "checkpoint_interval_s", "checkpoint_retention", "retry_limit", "restart_limit",
              "max_runtime_s", "spec", "unknown_field"]  # fmt: skip
    while len(bodies) < count:
        doc = json.loads(json.dumps(valid))
        choice = rng.random()
        if choice < 0.4:
            doc[rng.choice(fields)] = rng.choice(junk)
        elif choice < 0.6:
            doc.pop(rng.choice(list(doc)), None)
        elif choice < 0.8:
            doc["spec"] = {"argv": ["true"], "cwd": rng.choice(["..", "../x", "/tmp", "a/../../b"])}
        else:
            doc["resources"] = {"cpus": rng.choice(junk), "mem_mb": rng.choice(junk)}
        try:
            parse_manifest(doc)
        except ValueError:  # pydantic's ValidationError: truly malformed, keep it
            bodies.append(json.dumps(doc).encode())
    return bodies


def run_fuzz(
    server: ServerProcess, examples: int, manifests: int, phases: str | None = None
) -> tuple[int, int, int]:
    """Returns (server 5xx, manifests not refused with a 4xx, schemathesis exit status)."""
    before = _server_5xx(server.url)
    not_4xx = 0
    with httpx.Client(
        base_url=server.url,
        headers={**bearer(FUZZ_TOKEN), "content-type": "application/json"},
        timeout=30,
        trust_env=False,
    ) as c:
        for body in malformed_manifests(random.Random(11), manifests):
            status = c.post("/v1/jobs", content=body).status_code
            not_4xx += int(not 400 <= status < 500)
    st = Path(sys.executable).with_name("st")
    command = [str(st), "--no-color", "run", f"{server.url}/openapi.json",
               "--checks", "not_a_server_error", "--max-examples", str(examples),
               "--header", f"Authorization: Bearer {FUZZ_TOKEN}"]  # fmt: skip
    if phases:
        command += ["--phases", phases]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
        st_status = done.returncode
        log.info("schemathesis: %s", done.stdout[-2000:])
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("schemathesis did not run: %s", exc)
        st_status = -1
    return _server_5xx(server.url) - before, not_4xx, st_status


# -- main ----------------------------------------------------------------------------------


def _cleanup(data_dir: Path) -> None:
    for proc in psutil.process_iter(["cwd"]):
        try:
            if str(proc.info["cwd"] or "").startswith(str(data_dir)):
                proc.kill()
        except psutil.Error:
            continue


@contextlib.contextmanager
def fresh_service(root: Path, part: str, db: str | None) -> Iterator[ServerProcess]:
    """A new service (its own data folder and store) for one part of the benchmark, so that
    no part inherits another's backlog: the load part leaves ~2,400 queued jobs behind, and
    a manager still draining them would load the machine under the next part's timings.
    (With ``--db`` every part shares that database: the tenants are made once.)"""
    # /metrics counts the 5xx the fuzz part caused: open on this loopback-only service
    settings = ServiceSettings(data_dir=root / part, database_url=db, public_metrics=True)
    with contextlib.suppress(ConflictError):
        make_tenants(settings, [
            Tenant("load", LOAD_TOKEN, quota={"max_active_jobs": 1, "max_queued_jobs": 10**6}),
            Tenant("crash", CRASH_TOKEN, quota={"max_active_jobs": 5, "max_cores": 8}),
            Tenant("fuzz", FUZZ_TOKEN, quota={"max_active_jobs": 0}),
            Tenant("timing", TIME_TOKEN, quota={"max_active_jobs": 1, "max_cores": 2}),
        ])  # fmt: skip
    server = ServerProcess(settings)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        _cleanup(settings.data_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.service")
    parser.add_argument("--quick", action="store_true", help="short run for tests")
    parser.add_argument("--rate", type=float, default=None, help="load requests per second")
    parser.add_argument("--duration-s", type=float, default=None)
    parser.add_argument("--pairs", type=int, default=None, help="overhead: direct/service pairs")
    parser.add_argument("--db", default=None, help="database URL (default SQLite)")
    parser.add_argument(
        "--parts", default="load,crash,overhead,fuzz", help="comma-separated parts to run"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rate = args.rate or (50.0 if args.quick else 200.0)
    duration = args.duration_s or (3.0 if args.quick else 60.0)
    pairs = args.pairs or (1 if args.quick else 7)
    wall: dict[str, float] = {}
    parts = set(args.parts.split(","))
    nan = float("nan")
    load = LoadResult(0, 0, nan, nan, 0, 0, 0)
    crash = CrashResult(nan, nan, 0, 0, 0, nan, False)
    timing = OverheadResult([], [])
    fuzz_5xx, fuzz_not_4xx, st_status = 0, 0, 0
    with tempfile.TemporaryDirectory(prefix="deepedge-bench-") as tmp:
        root = Path(tmp)
        if "load" in parts:
            with fresh_service(root, "load", args.db) as server:
                started = time.perf_counter()
                load = run_load(server, rate, duration)
                wall["load"] = time.perf_counter() - started
        if "crash" in parts:
            with fresh_service(root, "crash", args.db) as server:
                started = time.perf_counter()
                crash = run_crash(server, steps=600)
                wall["crash"] = time.perf_counter() - started
        if "overhead" in parts:
            with fresh_service(root, "overhead", args.db) as server:
                started = time.perf_counter()
                # --quick times a sleeping learner (10 x 0.1 s), the full run training epochs.
                timing = run_overhead(
                    server, epochs=10 if args.quick else 5, pairs=pairs, train=not args.quick
                )
                wall["overhead"] = time.perf_counter() - started
        if "fuzz" in parts:
            with fresh_service(root, "fuzz", args.db) as server:
                started = time.perf_counter()
                fuzz_5xx, fuzz_not_4xx, st_status = run_fuzz(
                    server, examples=3 if args.quick else 50,
                    manifests=40 if args.quick else 400,
                    phases="examples,fuzzing" if args.quick else "examples,coverage,fuzzing",
                )  # fmt: skip
                wall["fuzz"] = time.perf_counter() - started
    rows = [
        ["load", f"{rate:g} req/s x {duration:g} s", f"sent={load.sent} errors={load.errors} "
         f"p50={load.p50_ms:.1f}ms p99={load.p99_ms:.1f}ms acked={load.acked} lost={load.lost} "
         f"dup={load.dup} client_send_lag_p99={load.send_lag_p99_ms:.1f}ms p99 by kind: "
         + " ".join(f"{k}={v:.1f}ms" for k, v in load.p99_ms_by_kind.items())],
        ["crash", "kill -9 with 5 running jobs", f"api_recovery={crash.api_recovery_s:.2f}s "
         f"(supervised) cold_start={crash.cold_start_s:.2f}s recovered={crash.recovered}/5 "
         f"lost={crash.lost} dup={crash.dup}"],
        ["crash", "kill -9 one learner", f"restart={crash.learner_restart_s:.2f}s "
         f"resumed_from_checkpoint={crash.resumed_from_checkpoint}"],
        ["overhead", f"digits MLP epochs, {len(timing.ratios)} interleaved pairs",
         timing.describe()],
        ["fuzz", "schemathesis + malformed manifests", f"server_5xx={fuzz_5xx} "
         f"manifests_not_4xx={fuzz_not_4xx} schemathesis_exit={st_status}"],
    ]  # fmt: skip
    rows = [[*row, f"{wall.get(row[0], 0.0):.1f}"] for row in rows if row[0] in parts]
    print(f"machine: {machine_description()}")
    print(table(["part", "setting", "measured", "wall_s"], rows))
    if timing.ratios:
        print(table(["pair", "order", "direct_s", "service_s", "service/direct - 1"],
                    timing.pair_rows()))  # fmt: skip
    print(result_line({
        "p99_ms": round(load.p99_ms, 2),
        "lost": load.lost + crash.lost,
        "dup": load.dup + crash.dup,
        "api_recovery_s": round(crash.api_recovery_s, 3),
        "learner_restart_s": round(crash.learner_restart_s, 3),
        "overhead": round(timing.overhead, 4),
        "fuzz_5xx": fuzz_5xx,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
