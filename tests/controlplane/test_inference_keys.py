"""Inference keys in the store: a key created with a job's token ends with the job, as the
token does; a key made with a tenant's token stays until revoked."""

from __future__ import annotations

import pytest

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.deployments import DeploymentStore
from deepedge.controlplane.inference_keys import InferenceKeyStore, JobToken
from deepedge.core.errors import UnauthorizedError
from deepedge.dataplane.keys import key_digest
from deepedge.service.manifest import parse_manifest
from deepedge.service.status import JobStatus
from deepedge.service.store import JobStore
from deepedge.service.tenants import TokenRole

QUICK = {"name": "q", "kind": "command", "spec": {"argv": ["true"]}}
RUN = (JobStatus.PENDING, JobStatus.DEPLOYING, JobStatus.PROCESSING)


@pytest.mark.parametrize(
    ("ending", "job_key_live_after"),
    [
        ((), True),  # the job still runs: its key works
        ((JobStatus.STORING,), True),
        ((JobStatus.STORING, JobStatus.COMPLETED), False),
        ((JobStatus.FAILED,), False),
        ((JobStatus.HALTED,), False),  # as its token: a resumed job gets new ones
    ],
)
def test_a_key_made_with_a_jobs_token_ends_with_the_job(
    store: JobStore, ending: tuple[JobStatus, ...], job_key_live_after: bool
) -> None:
    tenant = store.create_tenant("alice", "tok-alice")
    deployment, _ = DeploymentStore(store).create(tenant.id, DeploymentSpec(name="cam"))
    job, _ = store.submit(tenant, parse_manifest(QUICK))
    token, _ = store.tenancy.create_token(
        TokenRole.JOB, tenant_id=tenant.id, label="j", job_id=job.id
    )
    keys = InferenceKeyStore(store)
    job_key, job_secret = keys.create(deployment, "cam", job_token=JobToken(job.id, token.id))
    tenant_key, tenant_secret = keys.create(deployment, "gate")
    assert job_key.job_id == job.id and tenant_key.job_id is None
    for status in (*RUN, *ending):
        store.transition(job.id, status, "test")
    live = keys.live_grants()  # what the data plane checks requests against
    assert (key_digest(job_secret) in live) is job_key_live_after
    assert key_digest(tenant_secret) in live
    listed = {k.id: k for k in keys.of_deployment(deployment)}
    assert (listed[job_key.id].revoked_at is None) is job_key_live_after
    assert listed[job_key.id].document()["job_id"] == job.id


def test_no_key_is_made_with_the_token_of_a_job_that_ended(store: JobStore) -> None:
    tenant = store.create_tenant("alice", "tok-alice")
    deployment, _ = DeploymentStore(store).create(tenant.id, DeploymentSpec(name="cam"))
    job, _ = store.submit(tenant, parse_manifest(QUICK))
    token, _ = store.tenancy.create_token(
        TokenRole.JOB, tenant_id=tenant.id, label="j", job_id=job.id
    )
    # the job ended between the request's token check and the key's insert
    for status in (*RUN, JobStatus.STORING, JobStatus.COMPLETED):
        store.transition(job.id, status, "test")
    keys = InferenceKeyStore(store)
    with pytest.raises(UnauthorizedError):
        keys.create(deployment, "late", job_token=JobToken(job.id, token.id))
    assert keys.of_deployment(deployment) == []
