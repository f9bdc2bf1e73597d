"""Off-the-shelf inference clients against the live data plane: tritonclient end to end,
and the calls the KServe SDK makes, on a local Ray with Serve.

One module-scoped data plane serves ``acme.cam`` (the site's digits, one exported version,
every request sampled). The KServe SDK is not installed here: kserve 0.21.0 pins
``psutil<6``, whose ``Process`` has no ``net_connections`` (the ingress calls it), and
would replace protobuf, pandas and python-dateutil too (docs/DESIGN.md, "tritonclient is
driven"); so its REST client's reading of each answer is done with httpx the way it does
it (``response.json().get("live")`` and the like).
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from _support import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

MODEL = "acme.cam"
SPEC: dict[str, Any] = {
    "name": "cam",
    "labeller": "ground-truth",
    "window_s": 3600,
    "stream": {"window_size": 100},
    "serving": {"cpus": 0.5, "sample_fraction": 1.0, "max_batch_size": 16},
}


@dataclass
class Served:
    url: str
    deployment_id: str
    key: str
    samples: Any
    images: np.ndarray

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def get(self, path: str, key: bool = True, method: str = "GET", **kwargs: Any) -> Any:
        import httpx

        headers = {**(self.auth if key else {}), **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=10.0,
                             trust_env=False, **kwargs)  # fmt: skip

    def appended(self) -> int:
        return int(self.samples.usage(self.deployment_id).appended)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> Iterator[Served]:
    from deepedge.api.local_server import free_port
    from deepedge.controlplane.artifacts import artifact_path, write_version
    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.deployments import DeploymentStore, Step, VersionChange
    from deepedge.controlplane.inference_keys import InferenceKeyStore
    from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
    from deepedge.controlplane.serving import TableSource
    from deepedge.controlplane.site import Site
    from deepedge.dataplane.sample_store import SampleStore, sample_store_path
    from deepedge.runtime.serving.dataplane import DataPlaneAddress, start_data_plane
    from deepedge.service.store import JobStore, sqlite_url

    data_dir = tmp_path_factory.mktemp("clients")
    store = JobStore(sqlite_url(data_dir / "service.db"))
    store.migrate()
    acme = store.create_tenant("acme", "tok-acme", max_cores=64)
    registry = DeploymentStore(store)
    spec = DeploymentSpec.model_validate(SPEC)
    deployment, _ = registry.create(acme.id, spec, now=0.0)
    site = Site(data_dir)
    path = artifact_path(data_dir, deployment, 1)
    write_version(path, site.base_model(spec.model_copy(update={"base_epochs": 2})))
    site.export(deployment, path)
    registry.commit(registry.get_by_id(deployment.id), Step(
        deployment={"status": DeploymentStatus.ACTIVE, "serving_version": 1},
        versions=(VersionChange(1, VersionStatus.CANDIDATE),
                  VersionChange(1, VersionStatus.SERVING)),
    ))  # fmt: skip
    _, key = InferenceKeyStore(store).create(registry.get_by_id(deployment.id), "camera")
    port = free_port()
    samples = sample_store_path(data_dir)
    start_data_plane(None, DataPlaneAddress("127.0.0.1", port),
                     TableSource(store.url, str(data_dir)), samples, 0.1)  # fmt: skip
    served = Served(f"http://127.0.0.1:{port}", deployment.id, key, SampleStore(samples),
                    site.stream(spec).window(0).images.astype(np.float32))  # fmt: skip

    def ready() -> bool:
        try:
            return bool(served.get(f"/v2/models/{MODEL}/ready").status_code == 200)
        except Exception:
            return False

    assert wait_until(ready, timeout_s=240, interval_s=0.5), "the endpoint never got ready"
    yield served
    from ray import serve

    serve.shutdown()
    store.dispose()


def _triton(served: Served) -> Any:
    import tritonclient.http as triton

    return triton.InferenceServerClient(served.host)


def _input(batch: np.ndarray, binary: bool = True) -> Any:
    import tritonclient.http as triton

    given = triton.InferInput("input", list(batch.shape), "FP32")
    given.set_data_from_numpy(batch, binary_data=binary)
    return given


def test_health_readiness_metadata_and_config_read_as_the_clients_expect(
    served: Served,
) -> None:
    client = _triton(served)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(MODEL, headers=served.auth)
    # the KServe SDK: response.json().get("live") / .get("ready")
    assert served.get("/v2/health/live", key=False).json() == {"live": True}
    assert served.get("/v2/health/ready", key=False).json() == {"ready": True}
    assert served.get(f"/v2/models/{MODEL}/ready").json() == {"name": MODEL, "ready": True}
    assert served.get(f"/v2/models/{MODEL}/versions/1/ready").json()["ready"] is True
    metadata = client.get_model_metadata(MODEL, headers=served.auth)
    assert metadata["inputs"][0] == {"name": "input", "datatype": "FP32", "shape": [-1, 1, 16, 16]}
    config = client.get_model_config(MODEL, headers=served.auth)
    assert config["max_batch_size"] == 16
    assert config["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [1, 16, 16]}]
    # keyed, as inference is (docs/DESIGN.md): without a key, 401; the KServe SDK reads an
    # error's body only when its content type is exactly application/json
    refused = served.get(f"/v2/models/{MODEL}/ready", key=False)
    assert (refused.status_code, refused.headers["content-type"]) == (401, "application/json")
    assert "inference key" in refused.json()["error"]


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_infer_binary_and_json_batches_echo_the_clients_id(
    served: Served, compression: str | None
) -> None:
    import tritonclient.http as triton

    client = _triton(served)
    batch = served.images[:4]
    wanted = [triton.InferRequestedOutput("label", binary_data=True),
              triton.InferRequestedOutput("logits", binary_data=False)]  # fmt: skip
    for binary in (True, False):
        rid = f"cam-{compression}-{binary}"
        result = client.infer(MODEL, [_input(batch, binary)], outputs=wanted,
                              headers=served.auth, request_id=rid,
                              request_compression_algorithm=compression)  # fmt: skip
        response = result.get_response()
        assert response["id"] == rid and response["model_version"] == "1"
        labels, logits = result.as_numpy("label"), result.as_numpy("logits")
        assert labels.shape == (4,) and logits.shape == (4, 10)
        np.testing.assert_array_equal(labels, logits.argmax(axis=1))
        assert response["parameters"]["sampled"] is True


def test_feedback_takes_the_clients_id_and_a_batch_is_all_or_nothing(served: Served) -> None:
    client = _triton(served)
    for rid in ("gate-1", "gate-2"):
        client.infer(MODEL, [_input(served.images[:1])], headers=served.auth, request_id=rid)
    one = client.infer(MODEL, [_input(served.images[:1])], headers=served.auth)
    server_id = one.get_response()["parameters"]["request_id"]
    feedback = f"/v2/models/{MODEL}/feedback"
    mixed = {"labels": [{"id": "gate-1", "label": 1}, {"request_id": "nope", "label": 2}]}
    refused = served.get(feedback, method="POST", json=mixed)
    assert refused.status_code == 404 and "nope" in refused.json()["error"]
    stored = {s.client_id: s for s in served.samples.window(served.deployment_id, 0, 1e12)}
    assert stored["gate-1"].label is None  # nothing of the batch was written
    batch = {"labels": [{"id": "gate-1", "label": 1}, {"id": "gate-2", "label": 3},
                        {"request_id": server_id, "label": 4}]}  # fmt: skip
    ok = served.get(feedback, method="POST", json=batch)
    assert ok.status_code == 200 and ok.json() == {"labelled": 3}, ok.text
    labels = {s.request_id if s.client_id is None else s.client_id: s.label
              for s in served.samples.window(served.deployment_id, 0, 1e12)}  # fmt: skip
    assert (labels["gate-1"], labels["gate-2"], labels[server_id]) == (1, 3, 4)


def _nan_json() -> bytes:
    tensor = {"name": "input", "shape": [1, 1, 16, 16], "datatype": "FP32",
              "data": [float("nan")] + [0.0] * 255}  # fmt: skip
    return json.dumps({"inputs": [tensor]}).encode()  # (Python writes the bare NaN token)


def test_a_non_finite_input_is_refused_and_never_kept(served: Served) -> None:
    from tritonclient.utils import InferenceServerException

    before = served.appended()
    infer = f"/v2/models/{MODEL}/infer"
    for body in (_nan_json(), _nan_json().replace(b"NaN", b"1e39")):
        answer = served.get(infer, method="POST", content=body)
        assert answer.status_code == 400 and "input 'input'" in answer.json()["error"]
    bad = served.images[:2].copy()
    bad[1, 0, 3, 3] = np.inf
    with pytest.raises(InferenceServerException) as caught:
        _triton(served).infer(MODEL, [_input(bad)], headers=served.auth)
    assert caught.value.status() == "400" and "not finite" in caught.value.message()
    time.sleep(0.5)  # (a sample would have been committed before the answer anyway)
    assert served.appended() == before


def test_wrong_methods_bombs_and_unserved_paths_get_the_protocols_json(served: Served) -> None:
    wrong = served.get(f"/v2/models/{MODEL}/infer")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    posted = served.get("/v2/health/live", key=False, method="POST")
    assert posted.status_code == 405 and posted.json()["error"]
    bomb = gzip.compress(bytes(256 << 20))
    for encoding, body in (("gzip", bomb), ("deflate", zlib.compress(bytes(256 << 20)))):
        answer = served.get(f"/v2/models/{MODEL}/infer", method="POST", content=body,
                            headers={"Content-Encoding": encoding})  # fmt: skip
        assert answer.status_code == 413 and "inflates past" in answer.json()["error"]
    assert served.get(f"/v2/models/{MODEL}/infer", method="POST", content=b"{}",
                      headers={"Content-Encoding": "br"}).status_code == 415  # fmt: skip
    for path in ("/", "//v2/models/acme.cam/infer", "/v2/models/acme.nope", "/nothing"):
        answer = served.get(path, key=False)
        assert answer.status_code == 401, (path, answer.text)
        assert "inference key" in answer.json()["error"]
        assert served.get(path).status_code == 404


def test_statistics_count_the_answered_requests(served: Served) -> None:
    client = _triton(served)
    for _ in range(3):
        client.infer(MODEL, [_input(served.images[:2])], headers=served.auth)
    stats: list[dict[str, Any]] = []

    def counted() -> bool:
        stats[:] = client.get_inference_statistics(MODEL, headers=served.auth)["model_stats"]
        return bool(stats[0]["inference_count"] >= 6)

    assert wait_until(counted, timeout_s=20, interval_s=0.5), stats
    (stat,) = stats
    assert stat["name"] == MODEL and stat["execution_count"] >= 3
    assert stat["inference_stats"]["success"]["count"] >= 3
    assert stat["inference_stats"]["success"]["ns"] > 0


@pytest.mark.parametrize(
    "path",
    ["/-/routes", "/-/healthz", "/-/ROUTES", "/%2D/routes", f"/v2/models/{MODEL}/-/healthz",
     f"/v2/models/{MODEL}/-/routes"],
)  # fmt: skip
def test_the_route_listing_is_not_open_without_a_key(served: Served, path: str) -> None:
    for key in (False, True):
        answer = served.get(path, key=key)
        assert (answer.status_code, answer.json()) == (404, {"error": "unknown path"}), answer.text
        assert MODEL not in answer.text


def test_serve_listens_behind_an_ingress_that_comes_back_when_killed(served: Served) -> None:
    import os
    import signal

    import httpx
    import ray

    from deepedge.runtime.serving.serve_apps import INGRESS, NAMESPACE

    ingress = ray.get_actor(INGRESS, namespace=NAMESPACE)
    first = ray.get(ingress.status.remote())
    port = int(served.url.rsplit(":", 1)[1])
    assert first.config.port == port and first.config.upstream_port != port
    # behind it, on loopback, Serve's proxy answers its own routes: the ingress keeps them
    behind = f"http://127.0.0.1:{first.config.upstream_port}/-/routes"
    assert MODEL in httpx.get(behind, timeout=10.0, trust_env=False).text
    os.kill(first.pid, signal.SIGKILL)

    def answers() -> bool:
        try:
            return bool(served.get("/v2/health/live", key=False).status_code == 200)
        except Exception:
            return False

    def status() -> Any:
        return ray.get(ingress.status.remote())

    assert wait_until(lambda: status().pid not in (None, first.pid), timeout_s=60, interval_s=0.2)
    assert wait_until(answers, timeout_s=60, interval_s=0.2)
    assert status().restarts == first.restarts + 1
    assert served.get("/-/routes", key=False).status_code == 404
