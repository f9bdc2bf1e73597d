"""Plain-Python load generators, used when stress-ng is not installed.

``python -m deepedge.profiling.fallback_load cpu --workers N --load c``: N processes, each
busy for ``c * period`` and asleep for the rest of every ``period`` (duty cycle c).
``... mem --mb M``: holds M MiB resident (every page written once), then sleeps.
``... io --workers N --dir D``: N processes writing 1 MiB blocks with ``fsync`` to a file
in D, rewinding every 32 MiB.

Every generator stops after ``--timeout-s`` seconds at the latest; the launcher starts its
workers in its own process group, so a ``killpg`` from the stressor reaches all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable

from deepedge.profiling.child import die_with_parent

_PERIOD_S = 0.05
_PAGE = 4096
_IO_BLOCK = 1 << 20
_IO_SPAN = 32 << 20


def _cpu_worker(load: float, stop_at: float) -> None:
    while time.monotonic() < stop_at:
        start = time.monotonic()
        busy_until = start + load * _PERIOD_S
        x = 0
        while time.monotonic() < busy_until:
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        rest = start + _PERIOD_S - time.monotonic()
        if rest > 0:
            time.sleep(rest)


def _mem_holder(mb: int, stop_at: float) -> None:
    block = bytearray(mb << 20)
    for offset in range(0, len(block), _PAGE):
        block[offset] = 1  # touch every page so it is resident, not just reserved
    while time.monotonic() < stop_at:
        time.sleep(0.5)
    del block


def _io_writer(directory: str, index: int, stop_at: float) -> None:
    payload = os.urandom(_IO_BLOCK)
    path = os.path.join(directory, f"io-{os.getpid()}-{index}.bin")
    try:
        with open(path, "wb") as handle:
            written = 0
            while time.monotonic() < stop_at:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
                written += _IO_BLOCK
                if written >= _IO_SPAN:
                    handle.seek(0)
                    written = 0
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def _worker(target: Callable[..., None], *args: object) -> None:
    die_with_parent()  # fork clears the parent-death signal; set it again for the launcher
    target(*args)


def _run_workers(target: Callable[..., None], args_list: list[tuple[object, ...]]) -> None:
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(target, *args), daemon=True) for args in args_list]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="deepedge.profiling.fallback_load")
    parser.add_argument("kind", choices=["cpu", "mem", "io"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--mb", type=int, default=0)
    parser.add_argument("--dir", default=".")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    args = parser.parse_args(argv)
    # SIGTERM ends the launcher and, through the shared group, its workers
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    stop_at = time.monotonic() + args.timeout_s
    if args.kind == "cpu":
        load = min(1.0, max(0.0, args.load))
        _run_workers(_cpu_worker, [(load, stop_at)] * max(1, args.workers))
    elif args.kind == "mem":
        _mem_holder(max(0, args.mb), stop_at)
    else:
        _run_workers(_io_writer, [(args.dir, i, stop_at) for i in range(max(1, args.workers))])


if __name__ == "__main__":
    main()
