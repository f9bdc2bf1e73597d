"""GPU load generator: square matmuls on CUDA device 0 at a duty cycle.

``python -m deepedge.profiling.gpu_load --duty d``: in every ``period`` the GPU multiplies
``size x size`` matrices for ``d * period`` seconds (synchronising so the time is real GPU
time) and idles for the rest. It stops after ``--timeout-s`` seconds at the latest.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge.profiling.gpu_load")
    parser.add_argument("--duty", type=float, required=True)
    parser.add_argument("--period-s", type=float, default=0.1)
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    import torch

    if not torch.cuda.is_available():
        sys.stderr.write("gpu_load: no CUDA device\n")
        sys.exit(2)
    duty = min(1.0, max(0.0, args.duty))
    device = torch.device("cuda", 0)
    a = torch.randn(args.size, args.size, device=device)
    b = torch.randn(args.size, args.size, device=device)
    stop_at = time.monotonic() + args.timeout_s
    while time.monotonic() < stop_at:
        start = time.monotonic()
        busy_until = start + duty * args.period_s
        while time.monotonic() < busy_until:
            torch.matmul(a, b)
            torch.cuda.synchronize(device)
        rest = start + args.period_s - time.monotonic()
        if rest > 0:
            time.sleep(rest)


if __name__ == "__main__":
    main()
