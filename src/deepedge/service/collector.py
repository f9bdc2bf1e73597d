"""The collector: a small helper process that owns one learner attempt.

``python -m deepedge.service.collector --log L --pid-file P --exit-file E [limits]
[--sandbox SPEC] -- argv``

It runs in its own session (so it survives the service being killed), starts the learner
with resource limits -- inside the tenant's sandbox when given one
(:mod:`deepedge.core.sandbox`; the collector itself stays outside, as the service's user)
-- sends the learner's stdout and stderr to the log file, and when the learner ends --
normally, by error or killed -- records its exit status atomically in the exit file. The
service reads both files; neither depends on the service being alive, and the sandbox
sees neither. Standard library only, so that it starts fast.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from deepedge.core import sandbox
from deepedge.core.limits import add_limit_options, from_options
from deepedge.service.durable_files import take_json, write_atomic

SPAWN_FAILED = 127


def _start(args: argparse.Namespace, log: IO[bytes]) -> subprocess.Popen[bytes]:
    limits = from_options(args)
    env = (
        {str(k): str(v) for k, v in take_json(Path(args.env_file)).items()}
        if args.env_file
        else dict(os.environ)
    )
    if args.sandbox:
        return sandbox.spawn(
            sandbox.SandboxSpec.from_json(args.sandbox), args.argv, env=env,
            limits=limits, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return subprocess.Popen(
        args.argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=args.cwd,
        preexec_fn=limits.apply,
    )


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
            child = _start(args, log)
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
            if args.sandbox:  # to the learner, not to bubblewrap (whose end kills it at once)
                sandbox.signal_inside(child.pid, signum)
            else:
                child.send_signal(signum)

        signal.signal(signal.SIGTERM, _forward)
        signal.signal(signal.SIGINT, _forward)
        write_atomic(
            pid_path,
            {"collector_pid": os.getpid(), "learner_pid": child.pid, "started_at": started},
        )
        code = child.wait()
        ended = time.time()
        if args.sandbox:
            code, killed_by = sandbox.exit_status(code)
        else:
            killed_by = -code if code < 0 else None
            code = code if code >= 0 else 128 + (killed_by or 0)
        how = f"killed by signal {killed_by}" if killed_by else f"exit code {code}"
        log.write(f"=== attempt {args.attempt} ended {_stamp(ended)}: {how} ===\n".encode())
        write_atomic(
            exit_path,
            {"exit_code": code, "signal": killed_by, "spawn_error": None, "ended_at": ended},
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-collector")
    parser.add_argument("--log", required=True)
    parser.add_argument("--pid-file", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--sandbox", default=None, help="a SandboxSpec as JSON")
    parser.add_argument("--env-file", default=None, help="the learner's environment (JSON)")
    add_limit_options(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no learner command after --")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
