"""What the data plane says about a server and its models besides inference: health,
readiness, configuration and statistics, as the KServe and Triton clients read them.

* **Health** (``GET /v2/health/live``, ``/v2/health/ready``): ``{"live": true}`` and
  ``{"ready": true}``, the Open Inference Protocol's bodies (the KServe SDK parses them;
  tritonclient reads only the status).
* **Model readiness** (``GET /v2/models/<model>[/versions/<v>]/ready``): ``{"name",
  "ready": true}`` with a 200 (a version that is not loaded is a 404 in the error form).
* **Configuration** (``GET .../config``, Triton's model configuration extension): the
  signature as Triton's ``input``/``output`` (dimensions without the batch axis, which
  ``max_batch_size`` stands for), the dynamic batcher's delay and the replicas.
* **Statistics** (``GET .../stats``, Triton's statistics extension): one entry for the
  model, summed over its versions and replicas from the per-second traffic figures the
  replicas report (:class:`TrafficTotals`); they cover the figures kept (the last hour, not
  since the model loaded: ``span_s``), answered requests and images (each request is
  counted as one execution: the dynamic batches are not counted), with the latency of the
  answered and of the failed (5xx) requests apart.

Pure: documents in, documents out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deepedge.dataplane.protocol import Signature, TensorSpec

NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class TrafficTotals:
    """A deployment's answered traffic over the kept span of its per-second figures."""

    span_s: float  # the seconds the figures cover (0: none kept)
    requests: int
    images: int
    failed: int  # answered with a 5xx
    latency_ms_sum: float  # of every request, failed ones included
    failed_ms_sum: float  # of the failed ones
    last_second: int | None  # the newest second with a request (Unix time)


def live_document() -> dict[str, Any]:
    return {"live": True}


def ready_document() -> dict[str, Any]:
    return {"ready": True}


def model_ready_document(name: str) -> dict[str, Any]:
    return {"name": name, "ready": True}


def _dims(spec: TensorSpec) -> dict[str, Any]:
    """Triton's dimensions of one batch item; a scalar item is ``[1]`` reshaped to ``[]``."""
    item = [int(d) for d in spec.shape[1:]]
    document: dict[str, Any] = {"name": spec.name, "data_type": f"TYPE_{spec.datatype}"}
    if item:
        document["dims"] = item
    else:
        document["dims"] = [1]
        document["reshape"] = {"shape": []}
    return document


def model_config(
    name: str,
    platform: str,
    signature: Signature,
    max_batch_size: int,
    batch_wait_ms: float,
    replicas: int,
    gpus: float,
    versions: Sequence[int],
) -> dict[str, Any]:
    """Triton's model configuration of a served deployment (module docstring)."""
    return {
        "name": name,
        "platform": platform,
        "backend": "pytorch",
        "max_batch_size": max_batch_size,
        "input": [_dims(s) for s in signature.inputs],
        "output": [_dims(s) for s in signature.outputs],
        "dynamic_batching": {"max_queue_delay_microseconds": round(batch_wait_ms * 1000)},
        "instance_group": [{"count": replicas, "kind": "KIND_GPU" if gpus > 0 else "KIND_CPU"}],
        "version_policy": {"specific": {"versions": [int(v) for v in versions]}},
    }


def _duration(count: int, ms: float) -> dict[str, int]:
    return {"count": int(count), "ns": round(ms * NS_PER_MS)}


def model_statistics(name: str, totals: TrafficTotals) -> dict[str, Any]:
    """Triton's statistics of one model (module docstring): ``success`` and ``fail`` are
    the answered and the failed requests with their summed latency; ``queue`` and the
    compute phases are not measured apart and are left out."""
    answered = totals.requests - totals.failed
    return {
        "model_stats": [
            {
                "name": name,
                "version": "",
                "last_inference": (totals.last_second or 0) * 1000,
                "inference_count": totals.images,
                "execution_count": totals.requests,
                "inference_stats": {
                    "success": _duration(answered, totals.latency_ms_sum - totals.failed_ms_sum),
                    "fail": _duration(totals.failed, totals.failed_ms_sum),
                },
                "batch_stats": [],
                "span_s": totals.span_s,
            }
        ]
    }
