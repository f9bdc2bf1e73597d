"""The collector: a small helper process that owns one learner attempt.

``python -m deepedge.service.collector --log L --pid-file P --exit-file E [limits]
[--sandbox SPEC] -- argv``

It runs in its own session (so it survives the service being killed), starts the learner
with resource limits -- inside the tenant's sandbox when given one
(:mod:`deepedge.core.sandbox`; the collector itself stays outside, as the service's user)
and in a memory cgroup of ``mem_mb`` of its own where one can be made
(:mod:`deepedge.core.memory_cgroup`) -- sends the learner's stdout and stderr to the log
file, and when the learner ends -- normally, by error or killed -- records its exit status
atomically in the exit file. The service reads both files; neither depends on the service
being alive, and the sandbox sees neither. Standard library only, so that it starts fast.

Two limits are the collector's to enforce, and the exit record names the one that ended
the learner (``limit``, ``limit_reason``): the memory cgroup's OOM killer (read back from
the group when the learner ended with an error), and the tenant's disk quota (given
``--disk-quota-mb``, the collector counts its job's folder every
:data:`~deepedge.service.disk_quota.JOB_POLL_S` and kills the sandbox past it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from deepedge.core import memory_cgroup, sandbox
from deepedge.core.limits import LearnerLimits, LimitReached, add_limit_options, from_options
from deepedge.core.memory_cgroup import MemoryCgroup
from deepedge.service import disk_quota
from deepedge.service.disk_quota import DiskBudget
from deepedge.service.durable_files import take_json, write_atomic

SPAWN_FAILED = 127


def _start(
    args: argparse.Namespace, log: IO[bytes], limits: LearnerLimits, group: MemoryCgroup | None
) -> subprocess.Popen[bytes]:
    env = (
        {str(k): str(v) for k, v in take_json(Path(args.env_file)).items()}
        if args.env_file
        else dict(os.environ)
    )
    if args.sandbox:
        return sandbox.spawn(
            sandbox.SandboxSpec.from_json(args.sandbox), args.argv, env=env,
            limits=limits, stdout=log, stderr=subprocess.STDOUT, cgroup=group,
        )  # fmt: skip
    return subprocess.Popen(
        args.argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=args.cwd,
        preexec_fn=sandbox.pre_exec(limits, group),
    )


def _wait(
    child: subprocess.Popen[bytes], budget: DiskBudget | None, stop: Callable[[], None]
) -> tuple[int, str | None]:
    """The learner's exit status, and the disk quota's reason when the collector stopped
    it for the quota (``stop``: kill the whole run)."""
    if budget is None:
        return child.wait(), None
    while True:
        try:
            return child.wait(timeout=disk_quota.JOB_POLL_S), None
        except subprocess.TimeoutExpired:
            pass
        reason = budget.reached()
        if reason is not None:
            stop()
            return child.wait(), reason


def _stopper(
    child: subprocess.Popen[bytes], sandboxed: bool, group: MemoryCgroup | None
) -> Callable[[], None]:
    def stop() -> None:
        if group is not None:
            group.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if sandboxed:  # bubblewrap leads a process group of its own
                os.killpg(child.pid, signal.SIGKILL)
            else:
                child.kill()

    return stop


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
        limits = from_options(args)
        group = memory_cgroup.for_run(limits.mem_mb)
        try:
            child = _start(args, log, limits, group)
        except (OSError, subprocess.SubprocessError) as exc:
            if group is not None:
                group.remove()
            reason = exc.strerror if isinstance(exc, OSError) else None
            message = f"cannot start {args.argv[0]!r}: {reason or exc}"
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
        budget = disk_quota.from_options(args)
        code, disk_reason = _wait(child, budget, _stopper(child, bool(args.sandbox), group))
        ended = time.time()
        if args.sandbox:
            code, killed_by = sandbox.exit_status(code)
        else:
            killed_by = -code if code < 0 else None
            code = code if code >= 0 else 128 + (killed_by or 0)
        limit, reason = _limit_reached(code, disk_reason, group, log)
        how = f"killed by signal {killed_by}" if killed_by else f"exit code {code}"
        if reason:
            how += f"; {reason}"
        log.write(f"=== attempt {args.attempt} ended {_stamp(ended)}: {how} ===\n".encode())
        write_atomic(
            exit_path,
            {"exit_code": code, "signal": killed_by, "spawn_error": None, "ended_at": ended,
             "limit": limit, "limit_reason": reason},
        )  # fmt: skip
    return 0


def _limit_reached(
    code: int, disk_reason: str | None, group: MemoryCgroup | None, log: IO[bytes]
) -> tuple[str | None, str | None]:
    """Which limit ended the learner, and why in words: the disk quota the collector
    enforced, or the memory cgroup's OOM killer (of a learner that then failed; one that
    went on gets a line in its log); the group is removed here."""
    if group is None:
        memory = None
    else:
        memory = group.usage()
        group.remove()
    if disk_reason is not None:
        return LimitReached.DISK, disk_reason
    if memory is not None and memory.limit_reached:
        if code != 0:
            return LimitReached.MEMORY, memory.reason()
        log.write(f"=== {memory.reason()}: the kernel killed {memory.oom_kills} process(es) "
                  "of the learner, which went on ===\n".encode())  # fmt: skip
    return None, None


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
    disk_quota.add_budget_options(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no learner command after --")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
