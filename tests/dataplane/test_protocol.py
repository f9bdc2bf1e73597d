"""The Open Inference Protocol codec: requests in both encodings, responses, and every bad
request refused with a 4xx naming the problem (non-finite values included, in and out)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deepedge.core.errors import BadRequestError, InvalidInputError, RequestTooLargeError
from deepedge.dataplane.protocol import (
    RequestedOutput,
    Signature,
    TensorSpec,
    body_limit,
    check_body_size,
    check_finite_outputs,
    classifier_signature,
    encode_infer,
    error_body,
    json_bytes,
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


def _tensor(data: object, datatype: str = "FP32", shape: list[int] | None = None) -> bytes:
    tensor = {"name": "input", "shape": shape or [1, 1, 4, 4], "datatype": datatype,
              "data": data}  # fmt: skip
    return json.dumps({"inputs": [tensor]}).encode()


def _with_token(token: str) -> bytes:
    """A JSON request whose first value is a bare token (as Python's encoder writes NaN)."""
    return _tensor([0.0] * 16).replace(b"[0.0,", f"[{token},".encode(), 1)


NOT_FINITE = [
    ("NaN token", _with_token("NaN"), None, SIG),
    ("Infinity token", _with_token("Infinity"), None, SIG),
    ("-Infinity token", _with_token("-Infinity"), None, SIG),
    ("1e39 overflows FP32", _tensor([1e39] + [0.0] * 15), None, SIG),
    ("1e400 overflows any float", _with_token("1e400"), None, SIG),
    ("a NaN in the binary part", *binary_request(np.array([np.nan] + [0.0] * 15)
                                                 .reshape(1, 1, 4, 4)), SIG),
    ("70000 overflows FP16", _tensor([70000.0] + [0.0] * 15, "FP16"), None,
     Signature((TensorSpec("input", "FP16", (-1, 1, 4, 4)),), SIG.outputs)),
]  # fmt: skip


@pytest.mark.parametrize(("case", "body", "header", "signature"), NOT_FINITE,
                         ids=[c[0] for c in NOT_FINITE])  # fmt: skip
def test_a_non_finite_input_is_a_400_naming_the_input(
    case: str, body: bytes, header: int | None, signature: Signature
) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_infer(body, header, signature, max_batch=8)
    assert caught.value.http_status == 400
    assert "input 'input'" in caught.value.message and "not finite" in caught.value.message


def test_finite_extremes_and_integers_still_parse() -> None:
    largest = float(np.finfo(np.float32).max)
    parsed = parse_infer(_tensor([largest, -largest] + [0.0] * 14), None, SIG, 8)
    assert parsed.inputs["input"].reshape(-1)[0] == np.float32(largest)
    ints = Signature((TensorSpec("input", "INT64", (-1, 2)),), SIG.outputs)
    assert parse_infer(_tensor([1, 2], "INT64", [1, 2]), None, ints, 8).batch == 1


def test_no_answer_carries_a_bare_nan_token() -> None:
    with pytest.raises(ValueError, match="Out of range float"):
        json_bytes({"x": float("nan")})
    logits = np.array([[np.nan, 1.0, 0.0]], dtype=np.float32)
    outputs = {"logits": logits, "label": np.array([1])}
    with pytest.raises(ValueError):
        encode_infer("t.m", "1", "r", outputs, [RequestedOutput("logits", False)])
    assert json.loads(error_body("bad")) == {"error": "bad"}


@pytest.mark.parametrize(("value", "refused"), [(np.nan, True), (np.inf, True),
                                                (-np.inf, True), (3.0e38, False)])  # fmt: skip
def test_a_non_finite_answer_is_a_422_naming_the_output(value: float, refused: bool) -> None:
    logits = np.array([[0.0, value, 1.0]], dtype=np.float32)
    outputs = {"logits": logits, "label": np.array([1], dtype=np.int64)}
    if not refused:
        check_finite_outputs(outputs, "2")
        return
    with pytest.raises(InvalidInputError) as caught:
        check_finite_outputs(outputs, "2")
    assert caught.value.http_status == 422 and "'logits'" in caught.value.message
    assert "version 2" in caught.value.message
