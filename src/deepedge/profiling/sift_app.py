"""The latency-critical background application: SIFT on a camera frame every 200 ms.

As in Deep-Edge's testbed (Section V-A), a frame of 640x320 pixels is acquired every
``period_s`` and OpenCV's SIFT extracts its scale- and rotation-invariant keypoints and
descriptors. The frame is a real photograph (scikit-image's bundled ``astronaut``, in grey),
read once. Frame k is released at ``t_0 + k * period_s``; when a frame overruns, the next
one starts as soon as it finishes. A frame *misses its deadline* when its execution time
exceeds ``deadline_s`` (the period by default).

The app runs in its own process, ``python -m deepedge.profiling.sift_app`` (so it competes
for the cores like the real app does), and prints one line per frame,
``<start> <exec_s> <n_keypoints> <missed>``, stamped with ``time.monotonic()``, the clock
all processes of the host share; :meth:`SiftApp.frames` selects a measurement window.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from deepedge.core.errors import InvalidInputError, RunFailedError
from deepedge.profiling.child import python_module, start_child, stderr_tail, stop_children

log = logging.getLogger(__name__)

SIFT_APP = "sift"
FRAME_SIZE = (640, 320)  # width x height, as in the paper's testbed
_READY = "ready"


@dataclass(frozen=True, slots=True)
class FrameRecord:
    start_s: float  # time.monotonic() when processing began
    exec_s: float  # SIFT execution time
    n_keypoints: int
    missed: bool  # exec_s > deadline_s


@dataclass(frozen=True, slots=True)
class FrameStats:
    """Summary of the frames of one window."""

    n_frames: int
    median_s: float
    mean_s: float
    p95_s: float
    miss_frac: float

    @classmethod
    def of(cls, frames: list[FrameRecord]) -> FrameStats:
        if not frames:
            raise RunFailedError("no SIFT frame completed in the measurement window")
        exec_s = np.array([f.exec_s for f in frames])
        return cls(
            n_frames=len(frames),
            median_s=float(np.median(exec_s)),
            mean_s=float(exec_s.mean()),
            p95_s=float(np.percentile(exec_s, 95)),
            miss_frac=float(np.mean([f.missed for f in frames])),
        )


def sift_frame(size: tuple[int, int] = FRAME_SIZE) -> np.ndarray:
    """The grey 8-bit frame the app processes: skimage's astronaut photo at ``size``."""
    import cv2
    from skimage import data

    grey = cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2GRAY)
    return cv2.resize(grey, size, interpolation=cv2.INTER_AREA)


def _app(period_s: float, deadline_s: float, size: tuple[int, int]) -> None:
    import cv2

    cv2.setNumThreads(1)  # one thread, like the single-threaded app on the testbed
    frame = sift_frame(size)
    sift = cv2.SIFT_create()  # type: ignore[attr-defined]
    sys.stdout.write(f"{_READY}\n")
    sys.stdout.flush()
    release = time.monotonic()
    while True:
        start = time.monotonic()
        keypoints, _ = sift.detectAndCompute(frame, None)
        exec_s = time.monotonic() - start
        sys.stdout.write(f"{start:.6f} {exec_s:.6f} {len(keypoints)} {int(exec_s > deadline_s)}\n")
        sys.stdout.flush()
        release = max(release + period_s, time.monotonic())
        time.sleep(max(0.0, release - time.monotonic()))


class SiftApp:
    """Context manager running the app process; :meth:`frames` returns a window's frames."""

    def __init__(
        self,
        period_s: float = 0.2,
        deadline_s: float | None = None,
        size: tuple[int, int] = FRAME_SIZE,
    ) -> None:
        if period_s <= 0:
            raise InvalidInputError(f"period_s must be > 0, got {period_s}", "period_s")
        self.period_s = period_s
        self.deadline_s = period_s if deadline_s is None else deadline_s
        self.size = size
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()
        self._records: list[FrameRecord] = []

    def __enter__(self) -> SiftApp:
        args = ["--period-s", str(self.period_s), "--deadline-s", str(self.deadline_s)]
        args += ["--width", str(self.size[0]), "--height", str(self.size[1])]
        self._proc = start_child(
            python_module("deepedge.profiling.sift_app", *args), stdout=subprocess.PIPE
        )
        try:
            assert self._proc.stdout is not None
            if self._proc.stdout.readline().decode().strip() != _READY:
                raise RunFailedError(f"the SIFT app failed to start: {stderr_tail(self._proc)}")
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name="sift-reader", daemon=True)
        self._reader.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _read(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        for raw in proc.stdout:
            parts = raw.split()
            if len(parts) != 4:
                continue
            record = FrameRecord(float(parts[0]), float(parts[1]), int(parts[2]), parts[3] == b"1")
            with self._lock:
                self._records.append(record)

    def frames(self, since_s: float, until_s: float) -> list[FrameRecord]:
        """Reported frames whose execution overlaps ``[since_s, until_s]``."""
        with self._lock:
            return [
                r for r in self._records if r.start_s <= until_s and r.start_s + r.exec_s >= since_s
            ]

    def forget_before(self, t_s: float) -> None:
        """Drop records older than ``t_s`` (keeps memory bounded in long sweeps)."""
        with self._lock:
            self._records = [r for r in self._records if r.start_s >= t_s]

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        if self._proc is not None:
            stop_children([self._proc])
            self._proc = None
        if self._reader is not None:
            self._reader.join(timeout=2)
            self._reader = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge.profiling.sift_app")
    parser.add_argument("--period-s", type=float, default=0.2)
    parser.add_argument("--deadline-s", type=float, default=0.2)
    parser.add_argument("--width", type=int, default=FRAME_SIZE[0])
    parser.add_argument("--height", type=int, default=FRAME_SIZE[1])
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    _app(args.period_s, args.deadline_s, (args.width, args.height))


if __name__ == "__main__":
    main()
