"""All-or-nothing deployment: a planted failure rolls back what was started, then backoff."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _service_helpers import demo_manifest, learner_pids, tick_until

from _support import wait_until
from deepedge.service.config import ServiceSettings
from deepedge.service.guardian import (
    DeployError,
    Deployment,
    Guardian,
    LaunchLearners,
    PrepareWorkspace,
    StageData,
    WriteLearnerSpec,
    backoff_s,
)
from deepedge.service.manager import Action, Manager
from deepedge.service.manifest import parse_manifest
from deepedge.service.records import LearnerRecord
from deepedge.service.status import ErrorCode, JobStatus
from deepedge.service.store import JobStore
from deepedge.service.supervisor import Supervisor


@dataclass
class PlantedFailure:
    """Fails its first ``failures`` applications, after everything before it has started."""

    failures: int = 10**6
    calls: int = 0
    rolled_back: int = 0
    name: str = "planted failure"

    def apply(self, deployment: Deployment) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("planted: network policy could not be applied")

    def rollback(self, deployment: Deployment) -> None:
        self.rolled_back += 1


@dataclass
class Recorder:
    """Records as the store does: an attempt first (pid 0), then its collector's pid."""

    by_attempt: dict[tuple[str, int, int], LearnerRecord] = field(default_factory=dict)

    def __call__(self, learner: LearnerRecord) -> None:
        self.by_attempt[(learner.job_id, learner.rank, learner.attempt)] = learner

    @property
    def learners(self) -> list[LearnerRecord]:
        return list(self.by_attempt.values())


def _guardian(supervisor: Supervisor, record: object, planted: PlantedFailure) -> Guardian:
    return Guardian([PrepareWorkspace(), StageData(), WriteLearnerSpec(),
                     LaunchLearners(supervisor, record), planted])  # type: ignore[arg-type]  # fmt: skip


@pytest.mark.parametrize(
    ("attempt", "base_s", "expected_s"),
    [(1, 0.5, 0.5), (2, 0.5, 1.0), (3, 0.5, 2.0), (10, 0.5, 30.0), (0, 1.0, 1.0)],
)
def test_backoff_doubles_and_is_capped(attempt: int, base_s: float, expected_s: float) -> None:
    assert backoff_s(attempt, base_s, cap_s=30.0) == expected_s


def test_planted_failure_rolls_back_every_started_learner(tmp_path: Path, store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok")
    manifest = demo_manifest(steps=1000, step_s=0.1, learners=2)
    job, _ = store.submit(tenant, manifest)
    supervisor, recorder, planted = Supervisor(), Recorder(), PlantedFailure()
    from deepedge.service.workspace import Workspace

    job_dir = Workspace(tmp_path).job_dir(tenant.id, job.id)
    deployment = Deployment(job, manifest, job_dir, attempt=0, resume_from=None)
    with pytest.raises(DeployError, match="planted failure") as info:
        _guardian(supervisor, recorder, planted).deploy(deployment)
    assert info.value.retryable
    assert len(recorder.learners) == 2  # both learners had really started
    assert planted.rolled_back == 1
    assert not any(supervisor.is_alive(lr) for lr in recorder.learners)
    assert learner_pids(job_dir) == []


def test_retries_with_backoff_then_fails_with_the_cause(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest(steps=1000, retry_limit=2))
    supervisor = Supervisor()
    manager = Manager(store, settings, supervisor,
                      _guardian(supervisor, store.add_learner, PlantedFailure()))  # fmt: skip
    assert tick_until(manager, lambda: store.get(job.id).status is JobStatus.FAILED, 60)
    failed = store.get(job.id)
    assert failed.error_code == ErrorCode.DEPLOY_FAILED
    assert "after 3 attempt(s)" in (failed.error_message or "")
    assert "planted" in (failed.error_message or "")
    history = store.history(job.id)
    retries = [
        h for h in history if h.status is JobStatus.PENDING and "retry in" in (h.cause or "")
    ]
    assert len(retries) == 2
    deploys = [h.at for h in history if h.status is JobStatus.DEPLOYING]
    assert deploys[2] - deploys[1] >= backoff_s(2, settings.backoff_base_s) * 0.9
    assert learner_pids(manager.job_dir(failed)) == []
    assert all(lr.exit_code is not None for lr in store.learners(job.id))


def test_a_transient_failure_is_retried_and_leaves_one_live_attempt(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    store = sqlite_store
    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest(steps=1000))
    supervisor = Supervisor()
    guardian = _guardian(supervisor, store.add_learner, PlantedFailure(failures=1))
    manager = Manager(store, settings, supervisor, guardian)
    try:
        assert tick_until(manager, lambda: store.get(job.id).status is JobStatus.PROCESSING, 60)
        assert len(learner_pids(manager.job_dir(job))) == 1
        assert [lr.exit_code is None for lr in store.learners(job.id)] == [False, True]
    finally:
        store.request_action(job.id, Action.HALT.value)
        tick_until(manager, lambda: store.get(job.id).status is JobStatus.HALTED, 30)


def test_interrupted_deploy_is_rolled_back_and_redeployed_once(
    settings: ServiceSettings, sqlite_store: JobStore
) -> None:
    """A deploy cut short (as by a crash: no rollback ran) is cleaned up by the next manager."""
    store = sqlite_store

    class Crash(BaseException):
        pass

    @dataclass
    class CrashMidDeploy(PlantedFailure):
        def apply(self, deployment: Deployment) -> None:
            raise Crash

    tenant = store.create_tenant("alice", "tok")
    job, _ = store.submit(tenant, demo_manifest(steps=1000))
    first = Supervisor()
    crashed = Manager(store, settings, first,
                      _guardian(first, store.add_learner, CrashMidDeploy()))  # fmt: skip
    with pytest.raises(Crash):
        tick_until(crashed, lambda: False, 30)
    assert store.get(job.id).status is JobStatus.DEPLOYING
    job_dir = crashed.job_dir(job)
    before = learner_pids(job_dir)
    assert len(before) == 1  # the half-deployed learner runs on
    restarted = Manager(store, settings)
    try:
        assert tick_until(restarted, lambda: store.get(job.id).status is JobStatus.PROCESSING, 60)
        time.sleep(0.3)
        assert learner_pids(job_dir) == before  # kept, not killed and started again
        causes = [h.cause or "" for h in store.history(job.id)]
        assert any("found started and kept" in c for c in causes)
        assert [lr.attempt for lr in store.learners(job.id)] == [0]
    finally:
        store.request_action(job.id, Action.HALT.value)
        tick_until(restarted, lambda: store.get(job.id).status is JobStatus.HALTED, 30)


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "started-unrecorded"])
def test_a_learner_that_finished_during_an_interrupted_deploy_never_runs_again(
    settings: ServiceSettings, sqlite_store: JobStore, recorded: bool
) -> None:
    """The manager died after starting a quick learner (with its record, or between the
    start and the record of its collector's pid): the learner finished meanwhile. The next
    manager finds its exit record and completes the job; the learner ran once."""
    store = sqlite_store

    class Crash(BaseException):
        pass

    @dataclass
    class CrashAfterLaunch(PlantedFailure):
        def apply(self, deployment: Deployment) -> None:
            raise Crash

    @dataclass
    class ForgetPid:
        """The record of the attempt before its collector existed, and nothing after."""

        def __call__(self, learner: LearnerRecord) -> None:
            if learner.pid == 0:
                store.add_learner(learner)

    tenant = store.create_tenant("alice", "tok")
    manifest = parse_manifest({
        "name": "quick", "kind": "command", "restart_limit": 0,
        "spec": {"argv": ["sh", "-c", "echo ran >> runs.txt"]},
    })  # fmt: skip
    job, _ = store.submit(tenant, manifest)
    first = Supervisor()
    record = store.add_learner if recorded else ForgetPid()
    crashed = Manager(store, settings, first, _guardian(first, record, CrashAfterLaunch()))
    with pytest.raises(Crash):
        tick_until(crashed, lambda: False, 30)
    job_dir = crashed.job_dir(job)
    assert wait_until(lambda: job_dir.exit_file(0, 0).exists(), 30)  # it ran and ended
    restarted = Manager(store, settings)
    assert tick_until(restarted, lambda: store.get(job.id).status is JobStatus.COMPLETED, 60)
    assert (job_dir.work / "runs.txt").read_text() == "ran\n"
    assert [(lr.attempt, lr.exit_code) for lr in store.learners(job.id)] == [(0, 0)]


@pytest.mark.parametrize(
    ("service_address", "inherited", "expected"),
    [
        ("10.0.0.1:6379", None, "10.0.0.1:6379"),  # the service's setting reaches the learner
        ("10.0.0.1:6379", "10.0.0.9:6379", "10.0.0.1:6379"),  # and beats its environment
        (None, "10.0.0.9:6379", "10.0.0.9:6379"),  # else the learner inherits the variable
        (None, None, None),  # else it starts an embedded Ray
    ],
)
def test_learners_connect_to_the_services_ray_cluster(
    tmp_path: Path,
    store: JobStore,
    monkeypatch: pytest.MonkeyPatch,
    service_address: str | None,
    inherited: str | None,
    expected: str | None,
) -> None:
    from deepedge.service.workspace import Workspace

    if inherited is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", inherited)
    tenant = store.create_tenant("alice", "tok")
    manifest = demo_manifest(steps=1, step_s=0.1)
    job, _ = store.submit(tenant, manifest)
    job_dir = Workspace(tmp_path).job_dir(tenant.id, job.id)
    deployment = Deployment(job, manifest, job_dir, 0, None, ray_address=service_address)
    assert deployment.env(0).get("RAY_ADDRESS") == expected


@pytest.mark.parametrize(
    ("address", "on_ray", "wrapped"),
    [
        ("10.0.0.1:6379", True, True),
        ("10.0.0.1:6379", False, False),
        (None, True, False),  # no cluster named: a local subprocess as before
    ],
)
def test_learners_on_ray_run_through_the_ray_learner_driver(
    tmp_path: Path, store: JobStore, address: str | None, on_ray: bool, wrapped: bool
) -> None:
    from deepedge.service.workspace import Workspace

    tenant = store.create_tenant("alice", "tok")
    manifest = demo_manifest(steps=1, step_s=0.1)
    job, _ = store.submit(tenant, manifest)
    job_dir = Workspace(tmp_path).job_dir(tenant.id, job.id)
    deployment = Deployment(
        job, manifest, job_dir, 0, None, ray_address=address, learners_on_ray=on_ray
    )
    deployment.argv = ["learner", "--flag"]
    argv = deployment.launch_argv()
    limits = deployment.launch_limits()
    if wrapped:
        assert argv[1:3] == ["-m", "deepedge.runtime.cluster.ray_learner"]
        assert argv[argv.index("--address") + 1] == address
        assert argv[argv.index("--mem-mb") + 1] == str(manifest.resources.mem_mb)  # on Ray
        assert argv[-3:] == ["--", "learner", "--flag"]
        assert limits.mem_mb > manifest.resources.mem_mb  # not an rlimit on the driver
        assert "--env-file" in argv  # the learner's environment, never the driver's
    else:
        assert argv == ["learner", "--flag"]
        assert limits == deployment.limits()
        assert limits.mem_mb == manifest.resources.mem_mb


@pytest.mark.parametrize(("node", "expected"), [("n1", ["--node", "n1"]), (None, [])])
def test_a_learner_on_ray_is_pinned_to_the_manifests_node(
    tmp_path: Path, store: JobStore, node: str | None, expected: list[str]
) -> None:
    from deepedge.service.workspace import Workspace

    tenant = store.create_tenant("alice", "tok")
    manifest = demo_manifest(steps=1, step_s=0.1)
    manifest = manifest.model_copy(
        update={"resources": manifest.resources.model_copy(update={"node": node})}
    )
    job, _ = store.submit(tenant, manifest)
    job_dir = Workspace(tmp_path).job_dir(tenant.id, job.id)
    deployment = Deployment(
        job, manifest, job_dir, 0, None, ray_address="10.0.0.1:6379", learners_on_ray=True
    )
    deployment.argv = ["learner"]
    argv = deployment.launch_argv()
    driver_args = argv[: argv.index("--")]
    assert [a for a in driver_args if a == "--node"] == expected[:1]
    if expected:
        assert driver_args[driver_args.index("--node") + 1] == "n1"
    assert argv[-2:] == ["--", "learner"]
    r = manifest.resources
    assert driver_args[driver_args.index("--nofile") + 1] == str(r.max_open_files)
    assert driver_args[driver_args.index("--nice") + 1] == str(r.nice)
    driver_limits = deployment.launch_limits()  # the driver's own: none of the learner's
    assert driver_limits.cpu_time_s is None and driver_limits.nice == 0
    local = Deployment(job, manifest, job_dir, 0, None, ray_address="10.0.0.1:6379")
    local.argv = ["learner"]
    assert local.launch_argv() == ["learner"]  # a local learner ignores the node


@pytest.mark.parametrize(
    ("fields", "ok"),
    [
        ({"workload": "digits", "live_cluster": True}, True),
        ({"live_cluster": True}, False),  # the bundled path has no live mode
        ({"workload": "digits", "live_cluster": True, "time_scale": 0.1}, False),
        ({"workload": "digits", "live_cluster": True, "cluster": {"workers": []}}, False),
    ],
)
def test_a_live_cluster_update_needs_a_workload_and_no_pacing(
    fields: dict[str, object], ok: bool
) -> None:
    from pydantic import ValidationError

    from deepedge.service.learner import ModelUpdateSpec

    if ok:
        assert ModelUpdateSpec.model_validate(fields).live_cluster
    else:
        with pytest.raises(ValidationError, match="live_cluster"):
            ModelUpdateSpec.model_validate(fields)
