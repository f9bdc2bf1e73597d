"""Run one service learner as a Ray task on the cluster, with its logs and exit status here.

``python -m deepedge.runtime.ray_learner --address A [--cpus C] [--gpus G] [--mem-mb M]
[--node ID] [--cwd DIR] -- argv...``

The job service's collector starts this small driver in place of the learner when the
service runs its learners on the cluster (``learners_on_ray``). The driver connects to the
cluster and submits one task, placed by resources (``num_cpus``, ``num_gpus``, ``memory``
and, with ``--node``, the node's ``deepedge-node:`` resource), that runs ``argv`` as a
subprocess on the chosen node with this process's environment and working directory
(the job directory must be reachable there: shared storage, or the head). The task is a
streaming generator: the learner's output comes back line by line and is written to this
process's stdout, which the collector appends to the job's log; the last item is the
learner's exit status, which becomes this process's (``128 + n`` when a signal ``n`` ended
it). SIGTERM or SIGINT here cancels the task, which terminates the learner on its node.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import ray

from deepedge.runtime.session import ensure_ray, node_resource

log = logging.getLogger(__name__)

_EXIT = "deepedge-learner-exit"  # tags the generator's last item: (tag, code)
_TERM_GRACE_S = 5.0


def run_learner_on_node(argv: Sequence[str], cwd: str, env: dict[str, str]) -> Iterator[object]:
    """The task body: ``argv``'s output lines (bytes), then ``(_EXIT, exit_code)``."""
    child = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        here = ray.get_runtime_context().get_node_id()
        yield f"=== learner task on Ray node {here} ===\n".encode()
        assert child.stdout is not None
        for line in iter(child.stdout.readline, b""):  # noqa: UP028 (Ray calls .send on a yield from)
            yield line
        code = child.wait()
        yield (_EXIT, code if code >= 0 else 128 - code)
    finally:  # cancelled (or the driver went away): the learner must not outlive the task
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()


def task_options(cpus: float, gpus: int, mem_mb: int, node: str | None) -> dict[str, object]:
    """Ray options of the learner task: placed by its resources (and node, when named)."""
    options: dict[str, object] = {
        "num_cpus": cpus,
        "num_gpus": gpus,
        "memory": mem_mb * 1024 * 1024,
        "max_retries": 0,
        "num_returns": "streaming",
    }
    if node:
        options["resources"] = {node_resource(node): 0.001}
    return options


class _Cancelled(Exception):
    pass


def _raise_cancelled(signum: int, frame: object) -> None:
    raise _Cancelled(signum)


def run(args: argparse.Namespace) -> int:
    ensure_ray(address=args.address)
    for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs its own
        signal.signal(sig, _raise_cancelled)
    remote = ray.remote(run_learner_on_node).options(
        **task_options(args.cpus, args.gpus, args.mem_mb, args.node)
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    stream: Any = remote.remote(args.argv, args.cwd or os.getcwd(), env)
    out = sys.stdout.buffer
    try:
        for ref in stream:
            item = ray.get(ref)
            if isinstance(item, tuple) and len(item) == 2 and item[0] == _EXIT:
                return int(item[1])
            out.write(item)
            out.flush()
    except _Cancelled as stop:
        ray.cancel(stream)
        signum = int(stop.args[0])
        out.write(f"learner task cancelled by signal {signum}\n".encode())
        return 128 + signum
    except ray.exceptions.RayError as exc:
        out.write(f"learner task failed on the cluster: {type(exc).__name__}: {exc}\n".encode())
        return 1
    out.write(b"learner task ended without an exit status\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-ray-learner")
    parser.add_argument("--address", required=True)
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--mem-mb", type=int, default=2048)
    parser.add_argument("--node", default=None)
    parser.add_argument("--cwd", default=None)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no learner command after --")
    try:
        return run(args)
    finally:
        if ray.is_initialized():
            ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
