"""The data plane's URL space and the documents besides inference: every route with the
method it takes (others 405), unknown paths 404, health, readiness, Triton's model
configuration and statistics."""

from __future__ import annotations

import json

import pytest

from deepedge.core.errors import DeepEdgeError, MethodNotAllowedError, NotFoundError
from deepedge.dataplane.model_reports import (
    TrafficTotals,
    model_config,
    model_ready_document,
    model_statistics,
)
from deepedge.dataplane.protocol import classifier_signature, error_headers, json_bytes
from deepedge.dataplane.routes import ModelAction, model_route, server_route


@pytest.mark.parametrize(("path", "document"), [
    ("/v2/health/live", {"live": True}),
    ("/v2/health/ready", {"ready": True}),
    ("/v2/health/ready/", {"ready": True}),
    ("/v2", {"name": "deepedge", "version": "1",
             "extensions": ["binary_tensor_data", "deepedge_feedback"]}),
    ("/", None),
    ("//v2/health/live", None),
    ("/v2/models/t.m", None),
])  # fmt: skip
def test_server_routes_answer_json_documents(path: str, document: object) -> None:
    answer = server_route(path, "GET")
    assert answer == document
    if answer is not None:  # (the KServe SDK parses these bodies)
        assert json.loads(json_bytes(answer)) == document


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_server_route_asked_with_another_method_is_405(method: str) -> None:
    with pytest.raises(MethodNotAllowedError) as caught:
        server_route("/v2/health/live", method)
    assert caught.value.http_status == 405 and error_headers(caught.value) == {"Allow": "GET"}


MODEL_ROUTES = [
    ("", "GET", ModelAction("", None)),
    ("/", "GET", ModelAction("", None)),
    ("/ready", "GET", ModelAction("ready", None)),
    ("/config", "GET", ModelAction("config", None)),
    ("/stats", "GET", ModelAction("stats", None)),
    ("/infer", "POST", ModelAction("infer", None)),
    ("/feedback", "POST", ModelAction("feedback", None)),
    ("/versions/3", "GET", ModelAction("", 3)),
    ("/versions/3/ready", "GET", ModelAction("ready", 3)),
    ("/versions/3/config", "GET", ModelAction("config", 3)),
    ("/versions/3/infer", "POST", ModelAction("infer", 3)),
    ("/infer", "GET", MethodNotAllowedError),
    ("/ready", "POST", MethodNotAllowedError),
    ("/feedback", "PUT", MethodNotAllowedError),
    ("", "DELETE", MethodNotAllowedError),
    ("/versions/3/infer", "GET", MethodNotAllowedError),
    ("/predict", "POST", NotFoundError),
    ("/infer/more", "POST", NotFoundError),
    ("/versions/x/infer", "POST", NotFoundError),
    ("/versions/3/stats", "GET", NotFoundError),
    ("/versions/3/feedback", "POST", NotFoundError),
]


@pytest.mark.parametrize(("suffix", "method", "expected"), MODEL_ROUTES)
def test_model_routes_and_their_methods(
    suffix: str, method: str, expected: ModelAction | type[DeepEdgeError]
) -> None:
    if isinstance(expected, ModelAction):
        assert model_route(suffix, method) == expected
        return
    with pytest.raises(expected) as caught:
        model_route(suffix, method)
    if expected is MethodNotAllowedError:
        assert caught.value.http_status == 405
        posted = "infer" in suffix or "feedback" in suffix
        assert error_headers(caught.value) == {"Allow": "POST" if posted else "GET"}


def test_readiness_and_config_read_like_triton_and_kserve() -> None:
    assert model_ready_document("t.m") == {"name": "t.m", "ready": True}
    sig = classifier_signature((1, 16, 16), 10)
    config = model_config("t.m", "pytorch_torchscript", sig, 16, 5.0, 2, 0.0, [1, 2])
    assert config["max_batch_size"] == 16
    assert config["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [1, 16, 16]}]
    assert config["output"] == [
        {"name": "logits", "data_type": "TYPE_FP32", "dims": [10]},
        {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}},
    ]
    assert config["dynamic_batching"] == {"max_queue_delay_microseconds": 5000}
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
    gpu = model_config("t.m", "p", sig, 16, 5.0, 1, 0.5, [1])
    assert gpu["instance_group"] == [{"count": 1, "kind": "KIND_GPU"}]


@pytest.mark.parametrize(("totals", "success", "fail", "last_ms"), [
    (TrafficTotals(60.0, 10, 25, 2, 100.0, 30.0, 1_700_000_000),
     {"count": 8, "ns": 70_000_000}, {"count": 2, "ns": 30_000_000}, 1_700_000_000_000),
    (TrafficTotals(0.0, 0, 0, 0, 0.0, 0.0, None),
     {"count": 0, "ns": 0}, {"count": 0, "ns": 0}, 0),
])  # fmt: skip
def test_statistics_split_answered_from_failed_requests(
    totals: TrafficTotals, success: dict[str, int], fail: dict[str, int], last_ms: int
) -> None:
    (stat,) = model_statistics("t.m", totals)["model_stats"]
    assert stat["inference_stats"] == {"success": success, "fail": fail}
    assert stat["inference_count"] == totals.images
    assert stat["execution_count"] == totals.requests
    assert stat["last_inference"] == last_ms and stat["span_s"] == totals.span_s
