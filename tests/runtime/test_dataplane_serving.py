"""The data plane for real: Ray Serve on a local Ray, HTTP requests from outside, the
serving table read from a real store, versions switched under load.

One module-scoped data plane (its start costs tens of seconds) serves one deployment
``acme.cam`` of the site's digits with two exported versions; the tests drive it the way
the control plane does (committing serving, canary and key changes to the store) and a
camera would (HTTP requests with an inference key): tritonclient for the protocol,
aiohttp for load.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from _support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPEC: dict[str, Any] = {
    "name": "cam",
    "labeller": "ground-truth",
    "window_s": 3600,
    "stream": {"window_size": 100},
    "canary": {"fraction": 0.3, "windows": 1},
    "serving": {"cpus": 0.5, "sample_fraction": 1.0, "max_batch_size": 16},
}


@dataclass
class Served:
    url: str
    store: Any
    registry: Any
    keys: Any
    deployment_id: str
    key: str
    other_key: str  # a key of another tenant's deployment
    samples: Any
    images: np.ndarray
    labels: np.ndarray

    def set_versions(self, **fields: Any) -> None:
        from deepedge.controlplane.deployments import Step

        current = self.registry.get_by_id(self.deployment_id)
        self.registry.commit(current, Step(deployment=fields))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> Iterator[Served]:
    from deepedge.api.local_server import free_port
    from deepedge.controlplane.artifacts import artifact_path, write_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, NewVersion, Step, VersionChange
    from deepedge.controlplane.inference_keys import InferenceKeyStore
    from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
    from deepedge.controlplane.serving import TableSource
    from deepedge.controlplane.site import Site
    from deepedge.dataplane.sample_store import SampleStore, sample_store_path
    from deepedge.runtime.serving.dataplane import DataPlaneAddress, start_data_plane
    from deepedge.service.store import JobStore, sqlite_url

    data_dir = tmp_path_factory.mktemp("dataplane")
    store = JobStore(sqlite_url(data_dir / "service.db"))
    store.migrate()
    acme = store.create_tenant("acme", "tok-acme", max_cores=64)
    other = store.create_tenant("other", "tok-other", max_cores=64)
    registry = DeploymentStore(store)
    spec = DeploymentSpec.model_validate(SPEC)
    deployment, _ = registry.create(acme.id, spec, now=0.0)
    theirs, _ = registry.create(other.id, spec, now=0.0)
    site = Site(data_dir)
    window = site.stream(spec).window(0)
    images, labels = window.images, window.labels
    for number, epochs in ((1, 8), (2, 4)):  # two trained versions (the first version's way)
        path = artifact_path(data_dir, deployment, number)
        write_version(path, site.base_model(spec.model_copy(update={"base_epochs": epochs})))
        site.export(deployment, path)
    current = registry.get_by_id(deployment.id)
    registry.commit(current, Step(
        deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
        new_versions=(NewVersion(2, 1, (0,), "second", status=VersionStatus.CANDIDATE),),
    ))  # fmt: skip
    keys = InferenceKeyStore(store)
    _, key = keys.create(registry.get_by_id(deployment.id), "camera")
    _, other_key = keys.create(registry.get_by_id(theirs.id), "camera")
    port = free_port()
    samples = sample_store_path(data_dir)
    start_data_plane(None, DataPlaneAddress("127.0.0.1", port),
                     TableSource(store.url, str(data_dir)), samples, 0.1)  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", store, registry, keys, deployment.id, key,
                    other_key, SampleStore(samples), images, labels)  # fmt: skip
    ready = wait_until(lambda: _status(served, "/v2/models/acme.cam/ready", key) == 200,
                       timeout_s=240, interval_s=0.5)  # fmt: skip
    assert ready, "the deployment's endpoint never got ready"
    yield served
    from ray import serve

    serve.shutdown()
    store.dispose()


def _status(served: Served, path: str, key: str | None) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.get(
            served.url + path, headers=headers, timeout=5.0, trust_env=False
        ).status_code
    except httpx.HTTPError:
        return 0


def test_an_oip_client_nobody_here_wrote_works_unchanged(served: Served) -> None:
    import tritonclient.http as triton

    client = triton.InferenceServerClient(served.url.removeprefix("http://"))
    auth = {"Authorization": f"Bearer {served.key}"}
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("acme.cam", headers=auth)
    metadata = client.get_model_metadata("acme.cam", headers=auth)
    assert metadata["inputs"][0] == {"name": "input", "datatype": "FP32", "shape": [-1, 1, 16, 16]}
    assert [o["name"] for o in metadata["outputs"]] == ["logits", "label"]
    batch = served.images[:4].astype(np.float32)
    given = triton.InferInput("input", list(batch.shape), "FP32")
    given.set_data_from_numpy(batch, binary_data=True)
    wanted = [triton.InferRequestedOutput("label", binary_data=True),
              triton.InferRequestedOutput("logits", binary_data=False)]  # fmt: skip
    result = client.infer("acme.cam", [given], outputs=wanted, headers=auth)
    response = result.get_response()
    assert response["model_name"] == "acme.cam" and response["model_version"] == "1"
    labels = result.as_numpy("label")
    logits = result.as_numpy("logits")
    assert labels.shape == (4,) and logits.shape == (4, 10)
    np.testing.assert_array_equal(labels, logits.argmax(axis=1))
    assert (labels == served.labels[:4]).mean() >= 0.5  # a trained model, not noise
    assert response["parameters"]["sampled"] is True


def _infer(served: Served, key: str, body: bytes | None = None, model: str = "acme.cam",
           version: int | None = None, headers: dict[str, str] | None = None) -> Any:  # fmt: skip
    import httpx

    from deepedge.dataplane.camera import infer_body

    if body is None:
        body, headers = infer_body(served.images[0])
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return httpx.post(served.url + path, content=body,
                      headers={**(headers or {}), "Authorization": f"Bearer {key}"},
                      timeout=10.0, trust_env=False)  # fmt: skip


def test_bad_requests_get_the_protocols_4xx_never_a_5xx(served: Served) -> None:
    def doc(**input_fields: Any) -> bytes:
        tensor = {"name": "input", "shape": [1, 1, 16, 16], "datatype": "FP32",
                  "data": [0.0] * 256, **input_fields}  # fmt: skip
        return json.dumps({"inputs": [tensor]}).encode()

    cases = [
        (doc(shape=[1, 3, 16, 16], data=[0.0] * 768), 400, "shape"),
        (doc(datatype="INT64"), 400, "datatype"),
        (doc(name="pixels"), 400, "pixels"),
        (b"{not json", 400, "JSON"),
        (b"x" * (64 << 20), 413, "limit"),
    ]
    for body, status, word in cases:
        answer = _infer(served, served.key, body, headers={"Content-Type": "application/json"})
        assert answer.status_code == status, (word, answer.text[:200])
        assert word in answer.json()["error"]
    assert _infer(served, served.key, model="acme.nope").status_code == 404
    assert _infer(served, served.key, version=7).status_code == 404
    assert _infer(served, "dpk_wrong").status_code == 401
    assert _infer(served, served.other_key).status_code == 404  # another tenant's model
    unknown = _infer(served, served.other_key, model="other.nope")
    assert unknown.status_code == 404 and unknown.json() == {"error": "unknown model"}


async def _load(served: Served, seconds: float, rate: float, key: str | None = None
                ) -> dict[str, Any]:  # fmt: skip
    """Open-loop requests at ``rate``/s for ``seconds`` (with ``key``, the fixture's by
    default): status and version of each answer."""
    import aiohttp

    from deepedge.dataplane.camera import infer_body

    body, headers = infer_body(served.images[0])
    headers = {**headers, "Authorization": f"Bearer {key or served.key}"}
    seen: list[tuple[float, int, str | None, str | None]] = []
    url = f"{served.url}/v2/models/acme.cam/infer"
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    answer = await r.json()
                    seen.append((time.monotonic(), r.status, answer.get("model_version"),
                                 answer.get("parameters", {}).get("route")))  # fmt: skip
            except aiohttp.ClientError:
                seen.append((time.monotonic(), 0, None, None))

        tasks = []
        start = time.monotonic()
        for k in range(int(seconds * rate)):
            await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return {"answers": seen}


def test_promotion_and_rollback_under_load_fail_no_request(served: Served) -> None:
    """The serving version switches 1 -> 2 -> 1 while requests keep coming: every request is
    answered 200 and names its version, and both versions answer in turn."""
    import threading

    result: dict[str, Any] = {}
    loader = threading.Thread(target=lambda: result.update(asyncio.run(_load(served, 12.0, 40))))
    loader.start()
    time.sleep(3.0)
    served.set_versions(serving_version=2, previous_version=1)
    time.sleep(4.0)
    served.set_versions(serving_version=1, previous_version=2)
    loader.join()
    answers = result["answers"]
    assert len(answers) == 480
    assert [a for a in answers if a[1] != 200] == []
    versions = [a[2] for a in sorted(answers)]
    assert all(v in {"1", "2"} for v in versions)
    assert "2" in versions and versions[-1] == "1"  # switched to 2, then back


def test_a_canary_gets_its_share_per_request_and_keys_revoke_at_once(served: Served) -> None:
    served.set_versions(canary_version=2, status="CANARY")
    try:
        assert wait_until(lambda: _infer(served, served.key).json()["parameters"]["route"]
                          == "canary", timeout_s=30, interval_s=0.05)  # fmt: skip
        answers = asyncio.run(_load(served, 10.0, 50))["answers"]
        routed = [a for a in answers if a[1] == 200]
        share = sum(a[3] == "canary" for a in routed) / len(routed)
        assert abs(share - 0.3) < 0.08, share  # 500 draws: sd 0.02
        assert all((a[2] == "2") == (a[3] == "canary") for a in routed)
        # Pinned: the client names a loaded version; it is never counted as canary traffic.
        pinned = _infer(served, served.key, version=2).json()
        assert pinned["model_version"] == "2" and pinned["parameters"]["route"] == "pinned"
    finally:
        served.set_versions(canary_version=None, status="ACTIVE")
    # Feedback: a sampled request takes a label; unknown ids 404, labels out of range 422.
    import httpx

    # (the canary's end reaches each replica with its next poll of the table)
    polled: list[dict[str, Any]] = []
    assert wait_until(lambda: polled.append(_infer(served, served.key).json())
                      or polled[-1].get("parameters", {}).get("route") == "serving",
                      timeout_s=30, interval_s=0.05)  # fmt: skip
    answer = polled[-1]
    assert all("parameters" in a for a in polled), [a for a in polled if "parameters" not in a]
    rid = answer["parameters"]["request_id"]
    assert answer["parameters"]["sampled"] is True
    stored = served.samples.get(served.deployment_id, rid)
    assert stored is not None and stored.version == 1
    feedback = f"{served.url}/v2/models/acme.cam/feedback"
    auth = {"Authorization": f"Bearer {served.key}"}
    ok = httpx.post(feedback, json={"request_id": rid, "label": 3}, headers=auth, trust_env=False)
    assert ok.status_code == 200, ok.text
    assert served.samples.get(served.deployment_id, rid).label == 3  # type: ignore[union-attr]
    unknown = httpx.post(feedback, json={"request_id": "nope", "label": 3}, headers=auth,
                         trust_env=False)  # fmt: skip
    assert unknown.status_code == 404
    bad = httpx.post(feedback, json={"request_id": rid, "label": 10}, headers=auth,
                     trust_env=False)  # fmt: skip
    assert bad.status_code == 422
    # A revoked key is refused within a table poll.
    record = served.registry.get_by_id(served.deployment_id)
    (key,) = [k for k in served.keys.of_deployment(record) if served.key.startswith(k.prefix)]
    served.keys.revoke(record, key.id)
    assert wait_until(lambda: _infer(served, served.key).status_code == 401, timeout_s=30,
                      interval_s=0.1)  # fmt: skip
    traffic = served.samples.traffic(served.deployment_id, time.time() + 1.0, span_s=60.0)
    assert traffic.requests > 500 and traffic.latency.p50_ms is not None


def test_latency_is_measured_where_the_client_sees_it_and_in_the_replica(served: Served) -> None:
    """The ingress times the requests a client sends (arrival to answer sent) for every
    second of the span; its median is at least the replicas' own, over the same seconds."""
    from deepedge.dataplane.ingress_traffic import REPORT_LAG_S, Coverage

    _, key = served.keys.create(served.registry.get_by_id(served.deployment_id), "latency")
    assert wait_until(lambda: _infer(served, key).status_code == 200, timeout_s=30,
                      interval_s=0.1)  # fmt: skip
    started = time.time()
    answers = asyncio.run(_load(served, 6.0, 40, key))["answers"]
    assert [a for a in answers if a[1] != 200] == []
    time.sleep(REPORT_LAG_S + 2.0)  # the ingress's figures are handed over once a second
    now = time.time()
    span_s = float(int(now) - REPORT_LAG_S - int(started))
    proxy = served.samples.ingress_latency("acme.cam", now, span_s, since_s=0.0)
    # the replicas' figures of the same seconds (the ingress's span ends REPORT_LAG_S earlier)
    replica = served.samples.traffic(served.deployment_id, now - REPORT_LAG_S, span_s).latency
    assert proxy.coverage is Coverage.COMPLETE, proxy.document()
    assert proxy.covered_s == span_s and proxy.failed == 0
    assert proxy.latency.requests >= 0.9 * replica.requests > 0, (proxy, replica)
    assert proxy.latency.p50_ms is not None and replica.p50_ms is not None
    assert proxy.latency.p50_ms >= replica.p50_ms, (proxy.latency, replica)
    assert proxy.latency.mean_ms is not None and replica.mean_ms is not None
    assert proxy.latency.mean_ms >= replica.mean_ms, (proxy.latency, replica)
    # another tenant's model, which nobody called: nothing, but the seconds are covered
    assert served.samples.ingress_latency("other.cam", now, span_s, 0.0).latency.requests == 0
