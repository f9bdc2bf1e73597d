"""The collector: a small helper process that owns one learner attempt.

``python -m deepedge.service.collector --log L --pid-file P --exit-file E [limits] -- argv``

It runs in its own session (so it survives the service being killed), starts the learner
with resource limits, sends the learner's stdout and stderr to the log file, and when the
learner ends -- normally, by error or killed -- records its exit status atomically in the
exit file. The service reads both files; neither depends on the service being alive.
Standard library only, so that it starts fast.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deepedge.core.limits import LearnerLimits
from deepedge.service.durable_files import write_atomic

SPAWN_FAILED = 127


def _stamp(at: float) -> str:
    """A log line's time as people read it: local wall clock with milliseconds and zone."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + (
        f".{int(at % 1 * 1000):03d} " + time.strftime("%Z", time.localtime(at))
    )


def run(args: argparse.Namespace) -> int:
    log_path, pid_path, exit_path = Path(args.log), Path(args.pid_file), Path(args.exit_file)
    with open(log_path, "ab", buffering=0) as log:
        started = time.time()
        log.write(f"=== attempt {args.attempt} started {_stamp(started)} ===\n".encode())
        try:
            child = subprocess.Popen(
                args.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=args.cwd,
                preexec_fn=LearnerLimits(
                    args.mem_mb, args.cpu_time_s, args.nofile, args.nice
                ).apply,
            )
        except OSError as exc:
            message = f"cannot start {args.argv[0]!r}: {exc.strerror or exc}"
            log.write(f"=== attempt {args.attempt} failed to start: {message} ===\n".encode())
            write_atomic(
                exit_path,
                {
                    "exit_code": SPAWN_FAILED,
                    "signal": None,
                    "spawn_error": message,
                    "ended_at": time.time(),
                },
            )
            return SPAWN_FAILED

        def _forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, _forward)
        signal.signal(signal.SIGINT, _forward)
        write_atomic(
            pid_path,
            {"collector_pid": os.getpid(), "learner_pid": child.pid, "started_at": started},
        )
        code = child.wait()
        ended = time.time()
        killed_by = -code if code < 0 else None
        how = f"killed by signal {killed_by}" if killed_by else f"exit code {code}"
        log.write(f"=== attempt {args.attempt} ended {_stamp(ended)}: {how} ===\n".encode())
        write_atomic(
            exit_path,
            {
                "exit_code": code if code >= 0 else 128 + (killed_by or 0),
                "signal": killed_by,
                "spawn_error": None,
                "ended_at": ended,
            },
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-collector")
    parser.add_argument("--log", required=True)
    parser.add_argument("--pid-file", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--mem-mb", type=int, required=True)
    parser.add_argument("--cpu-time-s", type=int, default=None)
    parser.add_argument("--nofile", type=int, default=1024)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no learner command after --")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
