"""The device types and background-application kinds of the edge nodes (what the performance
models know, and what agents report).

A worker's ``device`` field names one :class:`DeviceType`; a background application's
``kind`` names one :class:`AppKind`. Both are plain string enums so that JSON documents carry
readable values (``"jetson-tx2"``, ``"sift"``) and the Protocol keeps taking ``str``.
"""

from __future__ import annotations

from enum import StrEnum


class DeviceType(StrEnum):
    """Edge device classes of the Deep-Edge testbed (Section V-A)."""

    JETSON_TX2 = "jetson-tx2"  # 256-core Pascal GPU, 8 GB shared memory
    JETSON_NANO = "jetson-nano"  # 128-core Maxwell GPU, 4 GB shared memory
    RASPBERRY_PI_4 = "raspberry-pi-4"  # quad Cortex-A72, 4 GB, no CUDA GPU

    @property
    def has_gpu(self) -> bool:
        return self is not DeviceType.RASPBERRY_PI_4


class AppKind(StrEnum):
    """Latency-critical background applications whose pressure the models estimate."""

    SIFT = "sift"  # SIFT feature detection on a 640x320 frame every 200 ms (CPU-bound)
    DNN_INFERENCE = "dnn-inference"  # a small CNN served on the GPU (GPU-bound)
