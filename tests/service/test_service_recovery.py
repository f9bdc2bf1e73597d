"""kill -9 of a real service process mid-job: learners re-attached, nothing lost or doubled."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest
from _service_helpers import learner_pids

from _support import wait_until
from deepedge.api.local_server import ServerProcess, make_operator_token, make_tenant
from deepedge.service.config import ServiceSettings
from deepedge.service.workspace import JobDir

TOKEN = {"Authorization": "Bearer tok"}


def _manifest(steps: int) -> dict[str, object]:
    import sys

    return {"name": "long", "kind": "command", "checkpoint_interval_s": 0.3,
            "resources": {"cpus": 0.5},
            "spec": {"argv": [sys.executable, "-m", "deepedge.service.demo_learner",
                              "--steps", str(steps), "--step-s", "0.05"]}}  # fmt: skip


@pytest.mark.slow
def test_kill_9_of_the_service_reattaches_running_learners(tmp_path: Path) -> None:
    settings = ServiceSettings(data_dir=tmp_path / "data")
    make_tenant(settings, "t", "tok", max_active_jobs=3, max_cores=4)
    operator = {"Authorization": f"Bearer {make_operator_token(settings)}"}
    server = ServerProcess(settings)
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:
            ids = [c.post("/v1/jobs", json=_manifest(2000)).json()["id"] for _ in range(2)]
            done_id = c.post("/v1/jobs", json=_manifest(2)).json()["id"]

            def statuses() -> list[str]:
                return [c.get(f"/v1/jobs/{i}").json()["status"] for i in [*ids, done_id]]

            assert wait_until(lambda: statuses() == ["PROCESSING", "PROCESSING", "COMPLETED"], 60)
        tenant_dir = next((settings.data_dir / "jobs").iterdir())
        dirs = {i: JobDir(tenant_dir / i) for i in ids}
        before = {i: learner_pids(d) for i, d in dirs.items()}
        assert all(len(p) == 1 for p in before.values())
        killed = time.perf_counter()
        server.kill9_serving()  # the supervisor forks a new serving process
        assert server.wait_healthy(killed) < 30
        time.sleep(1.0)
        assert {i: learner_pids(d) for i, d in dirs.items()} == before
        server.kill9()  # now the whole service, supervisor included
        time.sleep(0.5)
        assert {i: learner_pids(d) for i, d in dirs.items()} == before  # learners outlive it
        server.start()
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:
            time.sleep(1.0)
            jobs = c.get("/v1/jobs").json()["jobs"]
            assert sorted(j["id"] for j in jobs) == sorted([*ids, done_id])
            assert statuses() == ["PROCESSING", "PROCESSING", "COMPLETED"]
            assert {i: learner_pids(d) for i, d in dirs.items()} == before  # re-attached
            metrics = httpx.get(f"{server.url}/metrics", headers=operator, trust_env=False).text
            assert 'deepedge_recovery_events_total{event="reattached"} 2.0' in metrics
            assert 'deepedge_recovery_events_total{event="learner_restarted"} 0.0' in metrics
            for i in ids:
                assert all(h["status"] != "RESTARTED" for h in
                           c.get(f"/v1/jobs/{i}").json()["history"])  # fmt: skip
                c.post(f"/v1/jobs/{i}/halt")
            assert wait_until(lambda: statuses()[:2] == ["HALTED", "HALTED"], 30)
        assert all(learner_pids(d) == [] for d in dirs.values())
    finally:
        server.stop()


@pytest.mark.slow
def test_the_service_tree_dies_with_its_supervisor_and_restarts_on_the_same_port(
    tmp_path: Path,
) -> None:
    """kill -9 of the main process alone: its API and manager go with it (no orphan keeps
    the port and acknowledges jobs nothing runs), and a new service binds the same port;
    a job submitted before the kill completes after the restart."""
    settings = ServiceSettings(data_dir=tmp_path / "data")
    make_tenant(settings, "t", "tok", max_active_jobs=3, max_cores=4)
    server = ServerProcess(settings)
    server.start()
    try:
        assert server.proc is not None
        children = [psutil.Process(pid) for pid in server.service_pids()]
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:
            job_id = c.post("/v1/jobs", json=_manifest(40)).json()["id"]
        server.proc.kill()  # SIGKILL of the supervisor only
        server.proc.wait()
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [] and len(gone) == 2
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/healthz", trust_env=False, timeout=2)
        server.start()  # the same port
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:
            assert wait_until(
                lambda: c.get(f"/v1/jobs/{job_id}").json()["status"] == "COMPLETED", 60
            )
    finally:
        server.stop()


@pytest.mark.slow
def test_a_stopped_service_stops_its_learners_and_restarts_them_without_spending_a_restart(
    tmp_path: Path,
) -> None:
    """SIGTERM (Ctrl-C) of `deepedge serve` stops what it started; the next start restarts
    the job from its checkpoint, restarts unspent (a crash would hand them over instead)."""
    settings = ServiceSettings(data_dir=tmp_path / "data")
    make_tenant(settings, "t", "tok", max_active_jobs=3, max_cores=4)
    server = ServerProcess(settings)
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:
            job = c.post("/v1/jobs", json={**_manifest(2000), "restart_limit": 0}).json()["id"]
            assert wait_until(lambda: c.get(f"/v1/jobs/{job}").json()["status"] == "PROCESSING",
                              60)  # fmt: skip
        job_dir = JobDir(next((settings.data_dir / "jobs").iterdir()) / job)
        assert wait_until(lambda: len(learner_pids(job_dir)) == 1, 30)
        before = learner_pids(job_dir)
        server.stop()  # SIGTERM to the supervisor, as Ctrl-C
        assert not [p for p in before if psutil.pid_exists(p)
                    and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        server.start()
        with httpx.Client(base_url=server.url, headers=TOKEN, trust_env=False, timeout=30) as c:

            def restarted() -> bool:
                doc = c.get(f"/v1/jobs/{job}").json()
                return (
                    doc["status"] == "PROCESSING"
                    and len(learner_pids(job_dir)) == 1
                    and any("stopped with the service" in h["cause"] for h in doc["history"])
                )

            assert wait_until(restarted, 60), c.get(f"/v1/jobs/{job}").json()
            assert c.get(f"/v1/jobs/{job}").json()["restarts"] == 0  # restart_limit 0: not spent
            assert learner_pids(job_dir) != before
            c.post(f"/v1/jobs/{job}/halt")
    finally:
        server.stop()
