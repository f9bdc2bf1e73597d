"""The Open Inference Protocol codec: requests in both encodings, responses, and every bad
request refused with a 4xx naming the problem."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deepedge.core.errors import BadRequestError, RequestTooLargeError
from deepedge.dataplane.protocol import (
    RequestedOutput,
    body_limit,
    check_body_size,
    classifier_signature,
    encode_infer,
    parse_infer,
)

SIG = classifier_signature((1, 4, 4), 3)


def binary_request(array: np.ndarray, **extra: object) -> tuple[bytes, int]:
    raw = array.astype("<f4").tobytes()
    header = json.dumps({"inputs": [{"name": "input", "shape": list(array.shape),
                                     "datatype": "FP32",
                                     "parameters": {"binary_data_size": len(raw)}}],
                         **extra}).encode()  # fmt: skip
    return header + raw, len(header)


def json_request(array: np.ndarray, nested: bool = False, **extra: object) -> bytes:
    data = array.tolist() if nested else array.reshape(-1).tolist()
    tensor = {"name": "input", "shape": list(array.shape), "datatype": "FP32", "data": data}
    return json.dumps({"inputs": [tensor], **extra}).encode()


@pytest.mark.parametrize("nested", [False, True])
def test_json_and_binary_requests_parse_to_the_same_tensor(nested: bool) -> None:
    x = np.random.default_rng(0).random((2, 1, 4, 4), dtype=np.float32)
    body, n = binary_request(x)
    from_binary = parse_infer(body, n, SIG, max_batch=8)
    from_json = parse_infer(json_request(x, nested), None, SIG, max_batch=8)
    np.testing.assert_array_equal(from_binary.inputs["input"], x)
    np.testing.assert_allclose(from_json.inputs["input"], x)
    assert from_binary.batch == 2
    assert [o.name for o in from_binary.outputs] == ["logits", "label"]


def test_requested_outputs_and_binary_output_parameter() -> None:
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)
    body = json_request(x, outputs=[{"name": "label", "parameters": {"binary_data": True}}])
    assert parse_infer(body, None, SIG, 8).outputs == (RequestedOutput("label", True),)
    body = json_request(x, parameters={"binary_data_output": True})
    assert all(o.binary for o in parse_infer(body, None, SIG, 8).outputs)


BAD = [
    (b"not json", None, "not valid JSON"),
    (b"[1, 2]", None, "must be a JSON object"),
    (json.dumps({"inputs": []}).encode(), None, "non-empty list"),
    (json.dumps({"inputs": [{"name": "pixels", "shape": [1, 1, 4, 4], "datatype": "FP32",
                             "data": [0.0] * 16}]}).encode(), None, "unknown input 'pixels'"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 4, 4], "datatype": "FP16",
                             "data": [0.0] * 16}]}).encode(), None, "datatype 'FP16'"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 4, 4], "datatype": "FP32",
                             "data": [0.0] * 48}]}).encode(), None, "shape [1, 3, 4, 4]"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 4, 4], "datatype": "FP32",
                             "data": [0.0] * 15}]}).encode(), None, "has 15 values"),
    (json.dumps({"inputs": [{"name": "input", "shape": [9, 1, 4, 4], "datatype": "FP32",
                             "data": [0.0] * 144}]}).encode(), None, "at most 8"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 4, 4], "datatype": "FP32",
                             "data": ["a"] * 16}]}).encode(), None, "not FP32 values"),
    (json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 4, 4], "datatype": "FP32",
                             "data": [0.0] * 16}], "outputs": [{"name": "probs"}]}).encode(),
     None, "unknown output 'probs'"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "header", "message"), BAD)
def test_bad_requests_are_400_naming_the_problem(
    body: bytes, header: int | None, message: str
) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_infer(body, header, SIG, max_batch=8)
    assert caught.value.http_status == 400
    assert message in caught.value.message


def test_binary_parts_must_match_their_declared_sizes() -> None:
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)
    body, n = binary_request(x)
    with pytest.raises(BadRequestError, match="ends before"):
        parse_infer(body[:-4], n, SIG, 8)
    with pytest.raises(BadRequestError, match="unclaimed"):
        parse_infer(body + b"\0\0\0\0", n, SIG, 8)
    with pytest.raises(BadRequestError, match="does not fit"):
        parse_infer(body, len(body) + 1, SIG, 8)


def test_responses_name_the_version_in_json_and_binary() -> None:
    logits = np.array([[0.1, 0.9, 0.0]], dtype=np.float32)
    labels = np.array([1], dtype=np.int64)
    outputs = {"logits": logits, "label": labels}
    body, header = encode_infer("t.m", "3", "r1", outputs,
                                [RequestedOutput("label", False)])  # fmt: skip
    assert header is None
    doc = json.loads(body)
    assert doc["model_version"] == "3" and doc["outputs"][0]["data"] == [1]
    body, header = encode_infer("t.m", "3", "r1", outputs,
                                [RequestedOutput("logits", True)], {"sampled": True})  # fmt: skip
    assert header is not None
    doc = json.loads(body[:header])
    assert doc["model_version"] == "3" and doc["parameters"] == {"sampled": True}
    np.testing.assert_array_equal(np.frombuffer(body[header:], "<f4").reshape(1, 3), logits)


def test_an_oversized_body_is_413() -> None:
    limit = body_limit(SIG, 8)
    check_body_size(limit, limit)
    with pytest.raises(RequestTooLargeError) as caught:
        check_body_size(limit + 1, limit)
    assert caught.value.http_status == 413
