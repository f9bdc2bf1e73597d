"""Builders of hand-made clusters for the sharding tests."""

from __future__ import annotations

from typing import Any

from deepedge.cluster.devices import DeviceType
from deepedge.planning.sharding.spec import ClusterSpec

CAPACITY_MB = {"jetson-tx2": 7200.0, "jetson-nano": 3600.0, "raspberry-pi-4": 3600.0}


def worker(
    wid: str,
    device: str = "jetson-tx2",
    cpu: float = 0.1,
    gpu: float | None = 0.1,
    mem: float = 0.3,
    apps: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    if not DeviceType(device).has_gpu:
        gpu = None
    doc: dict[str, Any] = {
        "id": wid,
        "device": device,
        "state": {"cpu_util": cpu, "gpu_util": gpu, "mem_util": mem},
        "mem_capacity_mb": CAPACITY_MB[device],
        "min_batch": 4,
        "max_batch": 64,
        "background_apps": apps or [],
    }
    doc.update(extra)
    return doc


def sift(name: str = "sift", deadline_s: float = 0.2) -> dict[str, Any]:
    return {"name": name, "kind": "sift", "deadline_s": deadline_s}


def cluster_doc(workers: list[dict[str, Any]], dataset_size: int = 1000, **extra: Any) -> dict:
    doc: dict[str, Any] = {
        "workers": workers,
        "parameter_server": {
            "device": "raspberry-pi-4",
            "state": {"cpu_util": 0.1, "gpu_util": None, "mem_util": 0.3},
        },
        "dataset_size": dataset_size,
        "num_epochs": 1,
    }
    doc.update(extra)
    return doc


def cluster(workers: list[dict[str, Any]], dataset_size: int = 1000, **extra: Any) -> ClusterSpec:
    return ClusterSpec.model_validate(cluster_doc(workers, dataset_size, **extra))
