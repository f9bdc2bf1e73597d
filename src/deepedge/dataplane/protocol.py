"""The Open Inference Protocol (v2, the REST protocol of KServe and Triton): requests,
responses and metadata as documents, with the binary tensor data extension.

Pure: bytes in, typed objects out, and back. Nothing here serves; the replicas of
:mod:`deepedge.runtime.serving.model_server` call it on every request.

* **Infer request**: ``{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype",
  "parameters"?, "data"?}], "outputs"?: [{"name", "parameters"?}]}``. With the binary
  extension the JSON header is followed by the tensors' raw bytes (little-endian, row major),
  the header's length is in the ``Inference-Header-Content-Length`` HTTP header, and each
  binary input says its size in ``parameters.binary_data_size``.
* **Infer response**: ``{"model_name", "model_version", "id", "parameters"?, "outputs":
  [{"name", "shape", "datatype", "data" | "parameters": {"binary_data_size"}}]}``; an output
  goes binary when its request output says ``binary_data: true`` or the request's
  ``binary_data_output`` parameter is true.
* **Errors**: ``{"error": "<message>"}`` with a 4xx status naming the problem
  (:class:`~deepedge.core.errors.BadRequestError` and friends).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deepedge.core.errors import (
    BadRequestError,
    DataPlaneStartingError,
    DeepEdgeError,
    InvalidInputError,
    MethodNotAllowedError,
    RequestTooLargeError,
)

HEADER_LENGTH = "inference-header-content-length"  # HTTP header names are case-insensitive
PROTOCOL_VERSION = "2"
EXTENSIONS = ("binary_tensor_data", "deepedge_feedback")
STARTING = "the data plane is starting; try again"  # a served model's route not up yet
STARTING_RETRY_AFTER_S = 1  # a camera's retry costs the ingress one small answer

DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor of a model's signature; ``-1`` in ``shape`` is any size (the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Signature:
    """What a served model takes and gives."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        known = ", ".join(repr(s.name) for s in self.inputs)
        raise BadRequestError(f"unknown input {name!r}; the model takes {known}", field="inputs")

    def output_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.outputs)


def classifier_signature(input_shape: Sequence[int], classes: int) -> Signature:
    """A classifier: a batch of normalised inputs (images ``(C, H, W)``, or a table's
    feature vectors ``(F,)``) in, logits and arg-max labels out."""
    return Signature(
        inputs=(TensorSpec("input", "FP32", (-1, *input_shape)),),
        outputs=(
            TensorSpec("logits", "FP32", (-1, classes)),
            TensorSpec("label", "INT64", (-1,)),
        ),
    )


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A parsed, checked infer request: ``inputs`` match the signature (batch first)."""

    id: str | None
    inputs: dict[str, np.ndarray]
    outputs: tuple[RequestedOutput, ...]  # what to return, in order
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def batch(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequestError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise BadRequestError(f"{what} must be a JSON object")
    return document


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise BadRequestError(f"{where}.shape must be a list of non-negative integers")
    return tuple(value)


def _check_shape(spec: TensorSpec, shape: tuple[int, ...], where: str, max_batch: int) -> None:
    expected = "[" + ", ".join("-1" if d < 0 else str(d) for d in spec.shape) + "]"
    if len(shape) != len(spec.shape) or any(
        want >= 0 and got != want for want, got in zip(spec.shape, shape, strict=True)
    ):
        raise BadRequestError(
            f"{where} has shape {list(shape)}; the model takes {expected}", field=where
        )
    if shape and shape[0] == 0:
        raise BadRequestError(f"{where} is an empty batch", field=where)
    if shape and shape[0] > max_batch:
        raise BadRequestError(
            f"{where} has a batch of {shape[0]}; at most {max_batch} per request", field=where
        )


def _parameters(document: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = document.get("parameters", {})
    if not isinstance(value, dict):
        raise BadRequestError(f"{where}.parameters must be an object")
    return value


def _check_finite(array: np.ndarray, spec: TensorSpec, where: str) -> None:
    """A floating-point input holds finite values only: NaN, an infinity or a number past
    the datatype's range (``1e39`` as FP32) is refused, never run nor kept as a sample."""
    if array.dtype.kind != "f" or bool(np.isfinite(array).all()):
        return
    bad = int(array.size - np.count_nonzero(np.isfinite(array)))
    raise BadRequestError(
        f"{where} has {bad} value(s) that are not finite {spec.datatype} numbers (NaN, "
        f"infinity, or beyond the {spec.datatype} range)",
        field=where,
    )


def parse_infer(
    body: bytes,
    header_length: int | None,
    signature: Signature,
    max_batch: int,
) -> InferRequest:
    """Parse and check an infer request (JSON, or JSON header + binary tensors).

    Raises :class:`BadRequestError` naming the problem: malformed JSON, an unknown, missing
    or repeated input, a datatype, shape or size that does not match the signature, a
    floating-point input that is not finite, an unknown output, or a binary part of the
    wrong length.
    """
    if header_length is not None:
        if not 0 < header_length <= len(body):
            raise BadRequestError(
                f"Inference-Header-Content-Length {header_length} does not fit a body of "
                f"{len(body)} bytes"
            )
        header, binary = body[:header_length], memoryview(body)[header_length:]
    else:
        header, binary = body, memoryview(b"")
    document = _json_object(header, "the request")
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequestError("id must be a string")
    raw_inputs = document.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise BadRequestError("inputs must be a non-empty list")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, raw in enumerate(raw_inputs):
        where = f"inputs[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise BadRequestError(f"{where} must be an object with a name")
        spec = signature.input(raw["name"])
        where = f"input {spec.name!r}"
        if spec.name in inputs:
            raise BadRequestError(f"{where} is given twice")
        datatype = raw.get("datatype")
        if datatype != spec.datatype:
            raise BadRequestError(
                f"{where} has datatype {datatype!r}; the model takes {spec.datatype}",
                field=where,
            )
        shape = _shape(raw.get("shape"), where)
        _check_shape(spec, shape, where, max_batch)
        dtype = DATATYPES[spec.datatype]
        count = math.prod(shape)
        size = _parameters(raw, where).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool):
                raise BadRequestError(f"{where}.parameters.binary_data_size must be an integer")
            if size != count * dtype.itemsize:
                raise BadRequestError(
                    f"{where} declares {size} binary bytes; shape {list(shape)} of "
                    f"{spec.datatype} is {count * dtype.itemsize}"
                )
            if offset + size > len(binary):
                raise BadRequestError(f"{where}: the body ends before its {size} binary bytes")
            array = np.frombuffer(binary[offset : offset + size], dtype=dtype).reshape(shape)
            offset += size
        else:
            data = raw.get("data")
            if data is None:
                raise BadRequestError(f"{where} has neither data nor binary_data_size")
            try:
                with np.errstate(over="ignore"):  # (a value past the datatype's range: inf)
                    array = np.asarray(data, dtype=dtype)
            except (TypeError, ValueError) as exc:
                raise BadRequestError(f"{where}.data is not {spec.datatype} values") from exc
            if array.size != count:
                raise BadRequestError(
                    f"{where}.data has {array.size} values; shape {list(shape)} needs {count}"
                )
            array = array.reshape(shape)
        _check_finite(array, spec, where)
        inputs[spec.name] = array
    if offset != len(binary):
        raise BadRequestError(f"{len(binary) - offset} binary bytes follow the inputs unclaimed")
    missing = [s.name for s in signature.inputs if s.name not in inputs]
    if missing:
        raise BadRequestError(f"missing input(s) {', '.join(map(repr, missing))}")
    batches = {a.shape[0] for a in inputs.values()}
    if len(batches) > 1:
        raise BadRequestError(f"inputs disagree on the batch size: {sorted(batches)}")
    parameters = _parameters(document, "the request")
    return InferRequest(request_id, inputs, _requested(document, signature, parameters), parameters)


def _requested(
    document: Mapping[str, Any], signature: Signature, parameters: Mapping[str, Any]
) -> tuple[RequestedOutput, ...]:
    default_binary = parameters.get("binary_data_output") is True
    raw_outputs = document.get("outputs")
    if raw_outputs is None:
        return tuple(RequestedOutput(n, default_binary) for n in signature.output_names())
    if not isinstance(raw_outputs, list):
        raise BadRequestError("outputs must be a list")
    known = signature.output_names()
    requested = []
    for i, raw in enumerate(raw_outputs):
        if not isinstance(raw, dict) or raw.get("name") not in known:
            name = raw.get("name") if isinstance(raw, dict) else raw
            raise BadRequestError(
                f"outputs[{i}]: unknown output {name!r}; the model gives "
                f"{', '.join(map(repr, known))}"
            )
        binary = _parameters(raw, f"outputs[{i}]").get("binary_data", default_binary)
        requested.append(RequestedOutput(raw["name"], binary is True))
    return tuple(requested)


def check_finite_outputs(outputs: Mapping[str, np.ndarray], version: str) -> None:
    """A model's answer is finite (a finite input can still overflow inside a model): one
    that is not is refused with a 422 naming the output, before it is answered or kept as a
    sample (its arg-max label would be arbitrary, and JSON has no NaN)."""
    for name, array in outputs.items():
        if array.dtype.kind == "f" and not bool(np.isfinite(array).all()):
            raise InvalidInputError(
                f"version {version} answered this input with non-finite {name!r} (NaN or "
                "infinity): its values are outside what the model can take",
                field=name,
            )


def _datatype_of(array: np.ndarray) -> str:
    for name, dtype in DATATYPES.items():
        if array.dtype == dtype:
            return name
    raise TypeError(f"no protocol datatype for {array.dtype}")


def encode_infer(
    model_name: str,
    version: str,
    request_id: str,
    outputs: Mapping[str, np.ndarray],
    requested: Sequence[RequestedOutput],
    parameters: Mapping[str, Any] | None = None,
) -> tuple[bytes, int | None]:
    """The response body and, when any output is binary, the JSON header's length (for the
    ``Inference-Header-Content-Length`` header)."""
    documents: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for want in requested:
        array = outputs[want.name]
        out: dict[str, Any] = {
            "name": want.name,
            "datatype": _datatype_of(array),
            "shape": list(array.shape),
        }
        if want.binary:
            raw = np.ascontiguousarray(array).tobytes()
            out["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            out["data"] = array.reshape(-1).tolist()
        documents.append(out)
    response: dict[str, Any] = {
        "model_name": model_name,
        "model_version": version,
        "id": request_id,
        "outputs": documents,
    }
    if parameters:
        response["parameters"] = dict(parameters)
    header = json_bytes(response)
    if not chunks:
        return header, None
    return header + b"".join(chunks), len(header)


def model_metadata(
    name: str, versions: Sequence[str], signature: Signature, platform: str
) -> dict[str, Any]:
    return {
        "name": name,
        "versions": list(versions),
        "platform": platform,
        "inputs": [s.document() for s in signature.inputs],
        "outputs": [s.document() for s in signature.outputs],
    }


def server_metadata(version: str) -> dict[str, Any]:
    return {"name": "deepedge", "version": version, "extensions": list(EXTENSIONS)}


def json_bytes(document: Any) -> bytes:
    """A JSON answer: strict JSON, never the bare ``NaN``/``Infinity`` tokens Python's
    encoder writes by default (no JSON parser outside Python reads them); a non-finite
    number raises :class:`ValueError` instead."""
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()


def error_body(message: str) -> bytes:
    return json_bytes({"error": message})


def error_headers(exc: DeepEdgeError) -> dict[str, str] | None:
    """The headers a refusal carries: ``Allow`` with a 405, ``Retry-After`` with a 503 of
    a data plane still starting."""
    if isinstance(exc, MethodNotAllowedError):
        return {"Allow": ", ".join(exc.allowed)}
    if isinstance(exc, DataPlaneStartingError):
        return {"Retry-After": str(exc.retry_after_s)}
    return None


def error_status(exc: DeepEdgeError) -> int:
    """The HTTP status of a refused request: the error's own, and never a 5xx for bad
    input (any :class:`~deepedge.core.errors.InvalidInputError` is at least a 400)."""
    return exc.http_status


def check_body_size(content_length: int | None, limit_bytes: int) -> None:
    if content_length is not None and content_length > limit_bytes:
        raise RequestTooLargeError(
            f"request body of {content_length} bytes is over this model's limit of "
            f"{limit_bytes} bytes",
            field="body",
        )


def body_limit(signature: Signature, max_batch: int, json_slack_bytes: int = 1 << 20) -> int:
    """The largest body a request can need: every input at the largest batch, as JSON
    numbers (about 24 bytes each) or binary, plus room for the header."""
    values = 0
    for spec in signature.inputs:
        values += max_batch * math.prod(d for d in spec.shape if d >= 0)
    return values * 24 + json_slack_bytes
