"""Tenants kept apart, measured: ``python -m deepedge.bench.isolation [--quick]``.

Two stages, each against real services on loopback:

1. **attacks** (:mod:`deepedge.bench.isolation_attacks`, :mod:`deepedge.bench.isolation_probes`):
   a hostile tenant tries every way tenant code enters the service (command jobs, workload
   entry points and model files, labellers, CSV and folder paths, symlinks, environment,
   the service's ports, resource exhaustion) to read, write, reach or exhaust what is not
   its own, and what the host shares is probed (:mod:`deepedge.bench.isolation_host`:
   the data plane's ports from the host's other addresses, without ``--quick``; sandbox
   uids across two services; a job's inference key; the hypervisor's vsock); each attack
   judges its own success (a secret read, a file written, a connection accepted, a process
   gone, a limit passed). ``--quick`` runs the fast ones (no workload imports, no long
   waits, no data plane): the part CI runs.
2. **crash** (:mod:`deepedge.bench.isolation_crash`): ``kill -9`` of each service process
   in turn and of all at once during 200 submissions with Idempotency-Keys, on SQLite and
   on PostgreSQL (started here; skipped, and said, where it cannot start).

Last line (``loop_period_err``: alice's window period error while bob's labeller sleeps,
:mod:`deepedge.bench.isolation_loop`; -1 when not run):
``RESULT attacks=... breaches=... crash_cases=... jobs_lost=... jobs_stuck=...
double_runs=... false_failures=... restart_ok=... loop_period_err=...``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from deepedge.api.local_server import ServerProcess, free_port
from deepedge.bench.harness.report import machine_description, result_line, table
from deepedge.bench.harness.site import Tenant, make_tenants
from deepedge.bench.isolation_attacks import (
    Arena,
    JobAttack,
    Outcome,
    ProbeAttack,
    job_attacks,
    last_words,
)
from deepedge.bench.isolation_crash import TARGETS, CaseResult, postgres, reset, run_case
from deepedge.bench.isolation_host import (
    furnish_host,
    host_job_attacks,
    host_probe_attacks,
    needs_data_plane,
)
from deepedge.bench.isolation_limits import QUOTA_MB, limit_attacks, limit_probes
from deepedge.bench.isolation_loop import LAST_PERIOD_ERR
from deepedge.bench.isolation_probes import (
    as_json,
    furnish,
    probe_attacks,
    summary_rows,
    victim_manifest,
)
from deepedge.service.config import ServiceSettings
from deepedge.service.sandbox import Isolation

log = logging.getLogger(__name__)

ALICE, BOB, MALLORY = "tok-alice", "tok-bob", "tok-mallory"
CANARY_VARIABLE = "BENCH_SERVICE_CANARY"


@contextlib.contextmanager
def arena(
    root: Path,
    isolation: Isolation = Isolation.SANDBOX,
    control_workers: int | None = None,
    serving: bool = False,
) -> Iterator[Arena]:
    """A service with alice (a running job holding her secret) and bob, the attacker (and,
    with ``serving``, the data plane, whose ports are attacked)."""
    settings = ServiceSettings(data_dir=root / "data", isolation=isolation, serving=serving,
                               serving_port=free_port())  # fmt: skip
    if control_workers is not None:  # (0: the control's loop, one deployment after another)
        settings = dataclasses.replace(settings, control_workers=control_workers)
    grants = root / "grants"
    victim_grant, attacker_grant = grants / "alice", grants / "bob"
    for folder in (victim_grant, attacker_grant, root / "host"):
        folder.mkdir(parents=True)
    grants.chmod(0o755)
    canary = secrets.token_hex(16)
    os.environ[CANARY_VARIABLE] = canary  # the service inherits it: no job may see it
    make_tenants(settings, [
        Tenant("alice", ALICE, (str(victim_grant),)),
        Tenant("bob", BOB, (str(attacker_grant),), {"max_active_jobs": 40, "max_cores": 64}),
        Tenant("mallory", MALLORY, quota={"max_disk_mb": QUOTA_MB}),
    ])  # fmt: skip
    furnish_host(settings.url)
    server = ServerProcess(settings)
    secret = f"ALICE-SECRET-{secrets.token_hex(8)}"
    place = Arena(server, root, ALICE, BOB, secret, canary, victim_grant=victim_grant,
                  attacker_grant=attacker_grant, quota_token=MALLORY)  # fmt: skip
    furnish(place)
    server.start()
    try:
        place.api_pid = server.service_pids()[0]
        with place.client(ALICE) as client:
            job = client.post("/v1/jobs", json=victim_manifest(place)).json()
            place.victim_job = job["id"]
            deadline = time.monotonic() + 60
            while client.get(f"/v1/jobs/{job['id']}").json()["status"] != "PROCESSING":
                if time.monotonic() > deadline:
                    raise RuntimeError("alice's job did not start")
                time.sleep(0.2)
        job_dir = next((settings.data_dir / "jobs").glob(f"*/{place.victim_job}"))
        place.victim_work, place.victim_log = job_dir / "work", job_dir / "logs" / "learner-0.log"
        deadline = time.monotonic() + 30
        while place.secret not in _read(place.victim_log) and time.monotonic() < deadline:
            time.sleep(0.2)
        yield place
    finally:
        with contextlib.suppress(OSError, StopIteration):
            (place.victim_work / "release").touch()
        server.stop()
        os.environ.pop(CANARY_VARIABLE, None)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_attacks(
    place: Arena, quick: bool, only: tuple[str, ...] = ()
) -> list[tuple[str, str, Outcome, float]]:
    """Every attack (``quick``: the fast ones; ``only``: those whose name or entry holds
    one of these words)."""

    def chosen(name: str, entry: str, fast: bool) -> bool:
        return (fast or not quick) and (not only or any(w in f"{name} {entry}" for w in only))

    results: list[tuple[str, str, Outcome, float]] = []
    jobs = [a for a in job_attacks() + limit_attacks() + host_job_attacks()
            if chosen(a.name, a.entry, a.quick)]  # fmt: skip
    started = time.perf_counter()
    submitted: list[tuple[JobAttack, str]] = []
    for attack in jobs:
        answer = place.submit(attack.manifest(place))
        if answer.status_code >= 400:  # refused at the door: nothing ran
            outcome = Outcome(False, f"refused with {answer.status_code}")
            results.append((attack.name, attack.entry, outcome, 0.0))
            continue
        submitted.append((attack, answer.json()["id"]))
    place.wait_ended([job for _, job in submitted])
    spent = time.perf_counter() - started
    for attack, job in submitted:
        try:
            output = place.log(job)
            outcome = attack.judge(place, job, output)
        except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
            outcome = Outcome(False, f"judge failed: {exc}")
        if not outcome.evidence:  # held: what the attacker saw instead
            outcome = Outcome(outcome.breached, last_words(output))
        results.append((attack.name, attack.entry, outcome, spent / max(len(submitted), 1)))
    probes = probe_attacks() + limit_probes() + host_probe_attacks()
    for probe in [p for p in probes if chosen(p.name, p.entry, p.quick)]:
        started = time.perf_counter()
        outcome = _probe(probe, place)
        results.append((probe.name, probe.entry, outcome, time.perf_counter() - started))
    return results


def _probe(probe: ProbeAttack, place: Arena) -> Outcome:
    try:
        return probe.run(place)
    except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
        return Outcome(False, f"probe failed: {type(exc).__name__}: {exc}")


def run_crash(root: Path, jobs: int, dbs: list[str], targets: tuple[str, ...]) -> list[CaseResult]:
    cases: list[CaseResult] = []
    if "sqlite" in dbs:
        cases += [run_case(root / "crash", None, "sqlite", t, jobs) for t in targets]
    if "postgres" in dbs:
        with postgres() as url:
            if url is None:
                print("postgres: cannot start a PostgreSQL server here; its cases were skipped")
            else:
                for target in targets:
                    reset(url)
                    cases.append(run_case(root / "crash", url, "postgres", target, jobs))
    return cases


def run_startup(root: Path, runs: int) -> dict[str, float]:
    """Median milliseconds to start and end ``python -c pass``: plain, and in a tenant's
    sandbox (bubblewrap, the user switch, the filter, the environment file), interleaved."""
    import statistics
    import subprocess
    import sys

    from deepedge.core.limits import LearnerLimits
    from deepedge.core.sandbox import spawn
    from deepedge.service.records import Tenant, TenantId
    from deepedge.service.sandbox import give_to_tenant, tenant_env, tenant_spec

    work = root / "startup"
    work.mkdir(parents=True)
    tenant = Tenant(TenantId("bench"), "bench", 1, 1, 1.0, 0, uid=299_999)
    give_to_tenant(tenant, [work])
    spec = tenant_spec(tenant, cwd=work, writable=[work])
    argv = [sys.executable, "-c", "pass"]
    limits = LearnerLimits(mem_mb=4096, max_processes=256)
    times: dict[str, list[float]] = {"plain": [], "sandboxed": []}
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, check=True, cwd=work)
        times["plain"].append(time.perf_counter() - started)
        started = time.perf_counter()
        child = spawn(spec, argv, env=tenant_env({}), limits=limits)
        if child.wait() != 0:
            raise RuntimeError("a sandboxed python -c pass failed")
        times["sandboxed"].append(time.perf_counter() - started)
    return {k: 1000.0 * statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m deepedge.bench.isolation")
    parser.add_argument("--quick", action="store_true", help="the fast attacks only (CI)")
    parser.add_argument("--parts", default="attacks,crash,startup", help="attacks, crash, startup")
    parser.add_argument("--jobs", type=int, default=None, help="submissions per crash case")
    parser.add_argument("--dbs", default="sqlite,postgres")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--attacks-json", type=Path, default=None, help="write every verdict")
    parser.add_argument("--control-workers", type=int, default=None,
                        help="the control loop's threads (0: one deployment after another, "
                        "the control for the stalling-labeller attack)")  # fmt: skip
    parser.add_argument("--only", default="", help="comma-separated words: only the attacks "
                        "whose name or entry holds one (e.g. 'served models')")  # fmt: skip
    parser.add_argument(
        "--trusted-tenants", action="store_true",
        help="the control: attack a service without sandbox (the attacks must succeed there)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    parts = set(args.parts.split(","))
    jobs = args.jobs or (30 if args.quick else 200)
    results: list[tuple[str, str, Outcome, float]] = []
    cases: list[CaseResult] = []
    startup: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="deepedge-isolation-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        if "attacks" in parts:
            isolation = Isolation.TRUSTED if args.trusted_tenants else Isolation.SANDBOX
            only = tuple(w for w in args.only.split(",") if w)
            serving = needs_data_plane(args.quick, only)
            with arena(root / "attacks", isolation, args.control_workers, serving) as place:
                results = run_attacks(place, args.quick, only)
        if "crash" in parts:
            targets = tuple(t for t in args.targets.split(",") if t)
            cases = run_crash(root, jobs, args.dbs.split(","), targets)
        if "startup" in parts:
            startup = run_startup(root, 5 if args.quick else 30)
    print(f"machine: {machine_description()}")
    if results:
        print(table(["attack", "entry", "verdict", "evidence", "s"], summary_rows(results)))
        if args.attacks_json is not None:
            args.attacks_json.write_text(as_json(results))
    if cases:
        print(table(
            ["db", "killed", "acked", "lost", "stuck", "double", "false_fail", "dup",
             "restart_ok", "wall_s"],
            [[c.db, c.target, c.acked, c.lost, c.stuck, c.double_runs, c.false_failures,
              c.duplicates, c.restart_ok, f"{c.wall_s:.0f}"] for c in cases],
        ))  # fmt: skip
    if startup:
        print(f"python -c pass: plain {startup['plain']:.1f} ms, in a sandbox "
              f"{startup['sandboxed']:.1f} ms (medians)")  # fmt: skip
    print(result_line({
        "attacks": len(results),
        "breaches": sum(o.breached for _, _, o, _ in results),
        "crash_cases": len(cases),
        "jobs_lost": sum(c.lost for c in cases),
        "jobs_stuck": sum(c.stuck for c in cases),
        "double_runs": sum(c.double_runs for c in cases),
        "false_failures": sum(c.false_failures for c in cases),
        "duplicates": sum(c.duplicates for c in cases),
        "restart_ok": int(all(c.restart_ok for c in cases)) if cases else 0,
        # alice's window period error while bob's labeller sleeps (-1: not measured)
        "loop_period_err": LAST_PERIOD_ERR[-1] if LAST_PERIOD_ERR else -1.0,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
