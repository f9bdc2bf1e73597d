"""The crash matrix of ``python -m deepedge.bench.isolation``: ``kill -9`` of each service
process in turn, and of all at once, during 200 job submissions with Idempotency-Keys.

One case is one fresh service (SQLite, or PostgreSQL by URL) and one target
(:data:`TARGETS`). Eight client threads submit quick sandboxed jobs, each under a key of its
own, retrying a submission that got no answer (a killed API) with the same key until it is
acknowledged. After a third of the acknowledgements the target is killed; where that took
the whole service down (the supervisor) a new one is started on the same port. Then every
acknowledged job must reach a final status. Each job appends a line to a file of its own
work folder when it runs, so a run twice is seen on disk. Counted:

* ``lost``: acknowledged, but not in the store;
* ``stuck``: not COMPLETED or FAILED at the deadline;
* ``double_runs``: ran more than once (two lines);
* ``false_failures``: FAILED, though the command cannot fail;
* ``duplicates``: one key, several jobs;
* ``restart_ok``: every restart bound the same port and answered.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from deepedge.api.local_server import ServerProcess, free_port, make_tenant
from deepedge.bench.harness.http import bearer
from deepedge.service.config import ServiceSettings

TOKEN = "tok-crash"
TARGETS = ("api", "manager", "supervisor", "api+manager", "all")
JOB = {"name": "quick", "kind": "command", "restart_limit": 3, "resources": {"cpus": 0.1},
       "spec": {"argv": ["sh", "-c", "echo ran >> runs.log"]}}  # fmt: skip
CLIENTS = 8
SETTLE_S = 240.0


@dataclass
class CaseResult:
    db: str
    target: str
    acked: int
    lost: int
    stuck: int
    double_runs: int
    false_failures: int
    duplicates: int
    restart_ok: bool
    wall_s: float


@dataclass
class Submitter:
    """Submits ``jobs`` jobs under keys of their own; retries a key until acknowledged."""

    url: str
    jobs: int
    acked: dict[str, str]  # key -> job id
    lock: threading.Lock

    def run(self, index: int) -> None:
        key = f"crash-{index}"
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            try:
                headers = bearer(TOKEN)
                with httpx.Client(
                    base_url=self.url, trust_env=False, timeout=10.0, headers=headers
                ) as client:
                    answer = client.post("/v1/jobs", json=JOB, headers={"Idempotency-Key": key})
                if answer.status_code in {200, 201}:
                    with self.lock:
                        self.acked[key] = answer.json()["id"]
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)


def _targets(server: ServerProcess, target: str) -> list[int]:
    assert server.proc is not None
    api, manager = server.service_pids()
    return {
        "api": [api], "manager": [manager], "supervisor": [server.proc.pid],
        "api+manager": [api, manager], "all": [server.proc.pid, api, manager],
    }[target]  # fmt: skip


def run_case(root: Path, db_url: str | None, db: str, target: str, jobs: int) -> CaseResult:
    started = time.perf_counter()
    settings = ServiceSettings(data_dir=root / f"{db}-{target}", database_url=db_url)
    make_tenant(settings, "crash", TOKEN, max_active_jobs=8, max_cores=64,
                max_queued_jobs=10_000)  # fmt: skip
    server = ServerProcess(settings, port=free_port())
    server.start()
    acked: dict[str, str] = {}
    submitter = Submitter(server.url, jobs, acked, threading.Lock())
    restart_ok = True
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(submitter.run, i) for i in range(jobs)]
            while len(acked) < jobs // 3 and not all(f.done() for f in futures):
                time.sleep(0.05)
            victims = _targets(server, target)
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert server.proc is not None
            if server.proc.pid in victims:  # the tree is gone: start it again, same port
                server.proc.wait()
                try:
                    server.start()
                except (RuntimeError, TimeoutError):
                    restart_ok = False
            for future in futures:
                future.result()
        counts = _settle(server, settings, acked)
    finally:
        server.stop()
        _end_learners(settings.data_dir)
    return CaseResult(db, target, len(acked), *counts, restart_ok,
                      time.perf_counter() - started)  # fmt: skip


def _settle(
    server: ServerProcess, settings: ServiceSettings, acked: dict[str, str]
) -> tuple[int, int, int, int, int]:
    """(lost, stuck, double runs, false failures, duplicates) once every job settled."""
    headers = bearer(TOKEN)
    final = {"COMPLETED", "FAILED"}
    statuses: dict[str, str] = {}
    deadline = time.monotonic() + SETTLE_S
    with httpx.Client(base_url=server.url, headers=headers, trust_env=False, timeout=30) as c:
        while time.monotonic() < deadline:
            for job_id in acked.values():
                if statuses.get(job_id) not in final:
                    answer = c.get(f"/v1/jobs/{job_id}")
                    statuses[job_id] = answer.json()["status"] if answer.status_code == 200 \
                        else "LOST"  # fmt: skip
            if all(s in final | {"LOST"} for s in statuses.values()):
                break
            time.sleep(0.5)
        listed = _all_jobs(c)
    lost = sum(s == "LOST" for s in statuses.values())
    stuck = sum(s not in final | {"LOST"} for s in statuses.values())
    failed = sum(s == "FAILED" for s in statuses.values())
    runs = [_runs(settings.data_dir, job_id) for job_id in acked.values()]
    duplicates = len(listed) - len(set(acked.values()))
    return lost, stuck, sum(r > 1 for r in runs), failed, max(duplicates, 0)


def _all_jobs(client: httpx.Client) -> list[str]:
    ids: list[str] = []
    params: dict[str, str | int | float] = {"limit": 500}
    while True:
        page = client.get("/v1/jobs", params=params).json()
        ids += [j["id"] for j in page["jobs"]]
        if page.get("next_before") is None:
            return ids
        params = {"limit": 500, "before": page["next_before"],
                  "before_id": page["next_before_id"]}  # fmt: skip


def _runs(data_dir: Path, job_id: str) -> int:
    for path in (data_dir / "jobs").glob(f"*/{job_id}/work/runs.log"):
        return len(path.read_text().splitlines())
    return 0


def _end_learners(data_dir: Path) -> None:
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(data_dir) in " ".join(proc.info["cmdline"] or []):
                proc.kill()


# -- PostgreSQL ----------------------------------------------------------------------------

PG_BIN = Path(os.environ.get("DEEPEDGE_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _as_pg_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextlib.contextmanager
def postgres() -> Iterator[str | None]:
    """A throw-away PostgreSQL server on loopback (None where it cannot start here)."""
    if not (PG_BIN / "initdb").exists():
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="deepedge-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    root.chmod(0o755)
    port = free_port()
    try:
        init = subprocess.run(_as_pg_user([str(PG_BIN / "initdb"), "-D", str(data), "-A",
                                           "trust", "-U", "deepedge", "--no-sync"]),
                              capture_output=True, check=False)  # fmt: skip
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c max_connections=300"
        start = init.returncode == 0 and subprocess.run(
            _as_pg_user([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-w",
                         "-l", str(root / "pg.log"), "start"]),
            capture_output=True, check=False,
        ).returncode == 0  # fmt: skip
        yield f"postgresql+psycopg://deepedge@127.0.0.1:{port}/postgres" if start else None
    finally:
        stop = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(_as_pg_user(stop), capture_output=True, check=False)
        shutil.rmtree(root, ignore_errors=True)


def reset(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
