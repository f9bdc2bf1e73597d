"""Service learners as Ray tasks: the job service on a real two-node Ray cluster.

The module's cluster is a :class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster` (a head
and raylet ``n1`` on 127.0.0.2). The manager runs its ticks here, in the test; every learner
goes collector -> ``ray_learner`` driver -> a Ray task on the node its manifest asks for
-> the learner subprocess, and the tests read what reaches the collector's files.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from _support import wait_until
from deepedge.runtime.cluster.ray_learner import learner_env, unplaceable_reason
from deepedge.service.config import ServiceSettings
from deepedge.service.manager import Action, Manager
from deepedge.service.manifest import parse_manifest
from deepedge.service.status import JobStatus as S
from deepedge.service.store import JobStore

WAIT_S = 180.0  # generous: Ray start-up on a loaded 2-core machine; no assert on durations


@pytest.mark.parametrize(
    ("sent", "worker", "gpu_ids", "expected"),
    [
        ({"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": "3"}, [], ""),  # no GPU asked
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "3"}, [3], "3"),  # Ray's
        ({}, {"CUDA_VISIBLE_DEVICES": "2"}, [2], "2"),
        ({}, {}, [], None),
    ],
)
def test_a_learner_given_gpus_sees_the_ones_ray_assigned(
    sent: dict[str, str], worker: dict[str, str], gpu_ids: list[int], expected: str | None
) -> None:
    env = learner_env({"A": "1", **sent}, worker, gpu_ids)
    assert env.get("CUDA_VISIBLE_DEVICES") == expected
    assert env["A"] == "1"


GIB = 1024.0**3
HEAD = {"CPU": 2.0, "memory": 4 * GIB, "deepedge-node:head": 1.0}
N1 = {"CPU": 1.0, "memory": 1 * GIB, "deepedge-node:n1": 1.0}
GPU_BOX = {"CPU": 4.0, "GPU": 1.0, "memory": 8 * GIB, "deepedge-node:tx2": 1.0}


@pytest.mark.parametrize(
    ("cpus", "gpus", "mem_mb", "node", "totals", "placeable"),
    [
        (1.0, 0, 256, None, [HEAD, N1], True),
        (1.0, 0, 256, "n1", [HEAD, N1], True),
        (2.0, 0, 256, "n1", [HEAD, N1], False),  # n1 has one CPU; the head's two don't count
        (1.0, 0, 256, "nope", [HEAD, N1], False),  # no such node
        (1.0, 1, 256, None, [HEAD, N1], False),  # no GPU anywhere
        (1.0, 1, 256, None, [HEAD, GPU_BOX], True),
        (1.0, 0, 2048, "n1", [HEAD, N1], False),  # n1's memory is 1 GiB
        (1.0, 0, 256, None, [], False),  # no alive node
    ],
)
def test_a_task_no_node_can_take_is_refused_with_the_reason(
    cpus: float,
    gpus: int,
    mem_mb: int,
    node: str | None,
    totals: list[dict[str, float]],
    placeable: bool,
) -> None:
    reason = unplaceable_reason(cpus, gpus, mem_mb, node, totals)
    assert (reason is None) is placeable
    if reason is not None:
        assert f"{mem_mb} MiB" in reason and f"({len(totals)} alive)" in reason


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster

    with LocalRayCluster(worker_ids=("n1",), cpus_per_node=1) as running:
        yield running


@pytest.fixture
def service(cluster: object, tmp_path: Path) -> Iterator[tuple[Manager, JobStore]]:
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster

    assert isinstance(cluster, LocalRayCluster)
    store = JobStore(f"sqlite:///{tmp_path / 'service.db'}")
    store.migrate()
    settings = ServiceSettings(
        data_dir=tmp_path / "data",
        tick_s=0.05,
        backoff_base_s=0.05,
        halt_grace_s=60.0,  # a halt that needed the SIGKILL would take this long: see below
        learner_start_timeout_s=WAIT_S,
        ray_address=cluster.address,
        learners_on_ray=True,
    )
    yield Manager(store, settings), store
    store.dispose()


def _command_job(store: JobStore, script: str, **fields: object) -> str:
    manifest = parse_manifest(
        {
            "name": "on-ray",
            "kind": "command",
            "resources": {"cpus": 1, "mem_mb": 256, "node": "n1"},
            "spec": {"argv": [sys.executable, "-c", textwrap.dedent(script)]},
            **fields,
        }
    )
    job, _ = store.submit(store.create_tenant("alice", "tok"), manifest)
    return job.id


def _until(manager: Manager, predicate: object) -> bool:

    assert callable(predicate)

    def ticked() -> bool:
        manager.tick()
        return bool(predicate())

    return wait_until(ticked, WAIT_S, interval_s=0.1)


@pytest.mark.ray
@pytest.mark.slow
def test_a_job_runs_on_its_node_restarts_by_exit_status_and_completes(
    cluster: object, service: tuple[Manager, JobStore]
) -> None:
    """Attempt 0 exits 3 (a crash), attempt 1 exits 0: the exit statuses came back from the
    node through the collector, and the manager's restart rule did the rest."""
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster

    assert isinstance(cluster, LocalRayCluster)
    manager, store = service
    job_id = _command_job(
        store,
        """
        import os, sys
        attempt = os.environ["DEEPEDGE_ATTEMPT"]
        print("learning", os.environ["DEEPEDGE_JOB_ID"], "attempt", attempt, flush=True)
        print("ray address", os.environ.get("RAY_ADDRESS"), flush=True)
        print("uid", os.getuid(), "home", os.environ.get("HOME"), flush=True)
        import resource
        limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_NOFILE,
                  resource.RLIMIT_AS, resource.RLIMIT_CPU)]
        print("limits", *limits, "nice", os.nice(0), flush=True)
        sys.exit(3 if attempt == "0" else 0)
        """,
        restart_limit=1,
        resources={"cpus": 1, "mem_mb": 256, "node": "n1", "max_open_files": 64,
                   "cpu_time_s": 100, "nice": 3},
    )  # fmt: skip
    assert _until(manager, lambda: store.get(job_id).status in {S.COMPLETED, S.FAILED})
    job = store.get(job_id)
    log = manager.job_dir(job).log_file(0).read_text()
    assert job.status is S.COMPLETED, (job.error_message, log)
    assert job.restarts == 1
    assert [lr.exit_code for lr in store.learners(job_id)] == [3, 0]
    assert f"learning {job_id} attempt 0" in log and f"learning {job_id} attempt 1" in log
    n1_ip = cluster.nodes["n1"].ip
    assert log.count(f"({n1_ip}) ===") == 2  # both attempts ran on n1, as the manifest asked
    assert "waiting for a node with 1 CPU, 0 GPU, 256 MiB memory, node n1" in log
    # Sandboxed on its node: the tenant's own user, an environment of its own, and no way to
    # the cluster (a learner that uses Ray starts its own inside its sandbox)
    assert "ray address None" in log
    tenant = store.tenant(job.tenant_id)
    expected_uid = tenant.uid if os.geteuid() == 0 else os.geteuid()
    assert f"uid {expected_uid} home /tmp" in log
    # the manifest's limits hold for the learner on its node, as under a local collector
    (limits,) = set(re.findall(r"limits (\d+) (\d+) (\d+) nice (\d+)", log))
    assert [int(v) for v in limits[:3]] == [64, 256 * 1024 * 1024, 100]
    assert int(limits[3]) >= 3


def _learner_processes(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if marker in cmdline and "ray_learner" not in cmdline and "collector" not in cmdline:
            found.append(proc)
    return found


@pytest.mark.ray
@pytest.mark.slow
def test_halting_a_job_cancels_its_task_and_ends_the_learner_on_the_node(
    service: tuple[Manager, JobStore],
) -> None:
    """The learner prints once and then stays quiet. A halt must cancel its task (not wait
    out the 60 s grace for the SIGKILL: the log says it was cancelled) and the learner
    process on the node must end."""
    manager, store = service
    marker = f"deepedge-halt-marker-{id(manager)}"
    job_id = _command_job(
        store,
        f"""
        import time
        print("learning", flush=True)
        while True:
            time.sleep(0.2)  # {marker}
        """,
    )
    job_dir = manager.job_dir(store.get(job_id))
    log_file = job_dir.log_file(0)
    assert _until(manager, lambda: log_file.exists() and "learning" in log_file.read_text())
    assert _learner_processes(marker), "the learner runs (on n1, a process of this machine)"
    store.request_action(job_id, Action.HALT.value)
    assert _until(manager, lambda: store.get(job_id).status is S.HALTED)
    assert _until(manager, lambda: not _learner_processes(marker))
    log = log_file.read_text()
    assert "cancelling the learner task (signal 15)" in log
    # The driver records its own exit before the collector's grace runs out (past it, the
    # collector's session is killed and the log ends without the exit record).
    assert _until(manager, lambda: "=== attempt 0 ended " in log_file.read_text().splitlines()[-1])
    assert "learner task cancelled by signal 15" in log_file.read_text()


@pytest.mark.ray
@pytest.mark.slow
def test_a_restarted_manager_reattaches_to_a_learner_running_on_ray(
    service: tuple[Manager, JobStore],
) -> None:
    """The manager goes away while the learner runs on n1 (as after a crash: nothing is
    stopped); a new manager finds the running attempt by its collector's pid, counts it
    re-attached, and completes the job when the learner exits 0 -- one attempt, no restart."""
    first, store = service
    job_id = _command_job(
        store,
        """
        import os, time
        print("learning", flush=True)
        while not os.path.exists("go"):
            time.sleep(0.1)
        print("done", flush=True)
        """,
    )
    job_dir = first.job_dir(store.get(job_id))
    log_file = job_dir.log_file(0)
    assert _until(first, lambda: log_file.exists() and "learning" in log_file.read_text())
    del first  # no stop: the collector, its driver and the task keep running
    second = Manager(store, service[0].settings)
    assert _until(second, lambda: second.recovery_events().get("reattached") == 1)
    (job_dir.work / "go").write_text("")
    assert _until(second, lambda: store.get(job_id).status is S.COMPLETED)
    assert [lr.exit_code for lr in store.learners(job_id)] == [0]
    assert "done" in log_file.read_text()


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_driver_takes_its_learner_along_and_the_attempt_is_restarted(
    service: tuple[Manager, JobStore],
) -> None:
    """SIGKILL the driver of attempt 0 (no cancel can run): Ray ends the task and the
    learner it started on n1; the collector records the death, the manager restarts the
    learner (attempt 1), which finishes the job."""
    manager, store = service
    marker = f"deepedge-driver-kill-{id(manager)}"
    job_id = _command_job(
        store,
        f"""
        import os, sys, time
        print("learning attempt", os.environ["DEEPEDGE_ATTEMPT"], flush=True)
        if os.environ["DEEPEDGE_ATTEMPT"] == "0":
            while True:
                time.sleep(0.2)  # {marker}
        """,
        restart_limit=1,
    )
    job_dir = manager.job_dir(store.get(job_id))
    log_file = job_dir.log_file(0)
    assert _until(
        manager, lambda: log_file.exists() and "learning attempt 0" in log_file.read_text()
    )
    learner = _learner_processes(marker)
    (attempt,) = store.learners(job_id)
    driver = manager.supervisor.learner_pid(job_dir, attempt)  # the collector's child
    assert driver is not None
    assert "deepedge.runtime.cluster.ray_learner" in psutil.Process(driver).cmdline()
    os.kill(driver, signal.SIGKILL)
    assert _until(manager, lambda: store.get(job_id).status is S.COMPLETED)
    assert [lr.exit_code for lr in store.learners(job_id)] == [137, 0]
    assert learner and _until(manager, lambda: not _learner_processes(marker))


@pytest.mark.ray
@pytest.mark.slow
def test_a_learner_no_node_can_take_fails_its_job_with_the_reason(
    service: tuple[Manager, JobStore],
) -> None:
    """Ray would keep the task pending for ever: the driver refuses it, and with no restart
    left the job fails with the reason in its message (the log's last lines)."""
    manager, store = service
    manifest = {"cpus": 1, "mem_mb": 256, "node": "no-such-node"}
    job_id = _command_job(store, "print('never runs')", restart_limit=0, resources=manifest)
    assert _until(manager, lambda: store.get(job_id).status is S.FAILED)
    job = store.get(job_id)
    assert "cannot place the learner task" in (job.error_message or "")
    assert "node no-such-node" in (job.error_message or "")
    assert [lr.exit_code for lr in store.learners(job_id)] == [2]


@pytest.mark.ray
@pytest.mark.slow
def test_a_learner_past_its_memory_on_its_node_is_stopped_there_and_says_so(
    service: tuple[Manager, JobStore],
) -> None:
    """Three processes of 150 MB each, every one within its 256 MB address space: the
    memory cgroup on the node bounds them together, and the log (hence the failed job's
    message) names the limit and the peak."""
    from deepedge.core import memory_cgroup

    if (reason := memory_cgroup.unavailable_reason()) is not None:
        pytest.skip(f"no memory cgroup: {reason}")
    manager, store = service
    job_id = _command_job(
        store,
        """
        import subprocess, sys
        hold = "b = b'x' * (150 << 20); import time; time.sleep(3)"
        kids = [subprocess.Popen([sys.executable, "-c", hold]) for _ in range(3)]
        sys.exit(1 if any(k.wait() for k in kids) else 0)
        """,
        restart_limit=0,
    )
    assert _until(manager, lambda: store.get(job_id).status in {S.COMPLETED, S.FAILED})
    job = store.get(job_id)
    assert job.status is S.FAILED
    assert re.search(r"memory limit 256 MB reached \(peak \d+ MB\)", job.error_message or "")
