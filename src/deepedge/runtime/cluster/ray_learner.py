"""Run one service learner as a Ray task on the cluster, with its logs and exit status here.

``python -m deepedge.runtime.cluster.ray_learner --address A [--cpus C] [--gpus G] --mem-mb M
[--node ID] [limits] [--cwd DIR] [--env-file F] [--sandbox SPEC] -- argv...``

The job service's collector starts this small driver in place of the learner when the
service runs its learners on the cluster (``learners_on_ray``). The driver connects to the
cluster and submits one task, placed by resources (``num_cpus``, ``num_gpus``, ``memory``
and, with ``--node``, the node's ``deepedge-node:`` resource), that runs ``argv`` as a
subprocess on the chosen node with the learner's environment (read from ``--env-file``,
never this driver's own: the driver runs with the service's rights) and working directory
(the job directory must be reachable there: shared storage, or the head) -- inside the
tenant's sandbox when given one (``--sandbox``: bubblewrap must be installed on every node,
and the runtime at the same paths as on the service's host). The task is a
streaming generator: the learner's output comes back line by line and is written to this
process's stdout, which the collector appends to the job's log; the last item is the
learner's exit status, which becomes this process's (``128 + n`` when a signal ``n`` ended
it). SIGTERM or SIGINT here cancels the task at once, also while the learner prints
nothing (the driver waits in short slices, never in a blocking ``next``): the task
SIGTERMs the learner on its node, its last output still reaches the log, and a task still
running ``_TERM_GRACE_S`` later is force-cancelled. With ``--node`` the manifest's
``resources.node`` pins the task (:mod:`deepedge.service.guardian` passes it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

import ray

from deepedge.core import memory_cgroup, sandbox
from deepedge.core.limits import LearnerLimits, add_limit_options, from_options
from deepedge.core.memory_cgroup import MemoryCgroup
from deepedge.runtime.cluster import ray_logs
from deepedge.runtime.cluster.session import ensure_ray, node_resource

log = logging.getLogger(__name__)

_EXIT = "deepedge-learner-exit"  # tags the generator's last item: (tag, code)
_TERM_GRACE_S = 5.0  # the learner's time to stop after SIGTERM, on its node
UNPLACEABLE = 2  # the driver's exit status when no node can take the task
SPAWN_FAILED = 127  # the learner could not start on its node (as a collector records it)
_POLL_S = 0.2  # how often the task body and the driver look for a cancellation


def _pump(stream: IO[bytes], lines: queue.SimpleQueue[bytes]) -> None:
    for line in iter(stream.readline, b""):
        lines.put(line)
    lines.put(b"")  # end of output


def learner_env(
    sent: Mapping[str, str], worker: Mapping[str, str], gpu_ids: Sequence[object]
) -> dict[str, str]:
    """The learner's environment: the one the service sent, except that a task given GPUs
    sees the node's GPUs Ray assigned to it (the worker's ``CUDA_VISIBLE_DEVICES``), not
    whatever the service's own host had."""
    env = dict(sent)
    if gpu_ids and "CUDA_VISIBLE_DEVICES" in worker:
        env["CUDA_VISIBLE_DEVICES"] = worker["CUDA_VISIBLE_DEVICES"]
    return env


def _start_on_node(
    argv: Sequence[str],
    cwd: str,
    env: dict[str, str],
    limits: LearnerLimits,
    sandbox_json: str | None,
    group: MemoryCgroup | None,
) -> subprocess.Popen[bytes]:
    if sandbox_json is not None:
        return sandbox.spawn(
            sandbox.SandboxSpec.from_json(sandbox_json), argv, env=env, limits=limits,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cgroup=group,
        )  # fmt: skip
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=sandbox.pre_exec(limits, group),
    )


def run_learner_on_node(
    argv: Sequence[str],
    cwd: str,
    env: dict[str, str],
    limits: LearnerLimits,
    sandbox_json: str | None = None,
) -> Iterator[object]:
    """The task body: ``argv``'s output lines (bytes), then ``(_EXIT, exit_code)``.

    A thread reads the learner's output, so the task body never blocks in a read: Ray's
    cancellation (a ``KeyboardInterrupt`` in this thread) lands within ``_POLL_S``, and the
    ``finally`` ends the learner (SIGTERM, then SIGKILL after ``_TERM_GRACE_S``). The
    learner runs under the job's ``limits``, as under a local collector (in a memory
    cgroup of ``mem_mb`` on its node where one can be made: a learner it stops says so in
    the log), and in the tenant's sandbox when ``sandbox_json`` gives one."""
    group = memory_cgroup.for_run(limits.mem_mb)
    try:
        child = _start_on_node(
            argv, cwd, learner_env(env, os.environ, ray.get_gpu_ids()), limits, sandbox_json,
            group,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:  # no bubblewrap, a bind source missing
        if group is not None:
            group.remove()
        here = ray.util.get_node_ip_address()
        yield f"=== cannot start the learner on {here}: {exc} ===\n".encode()
        yield (_EXIT, SPAWN_FAILED)
        return
    try:
        here = ray.get_runtime_context().get_node_id()
        ip = ray.util.get_node_ip_address()
        yield f"=== learner task on Ray node {here} ({ip}) ===\n".encode()
        assert child.stdout is not None
        lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if not line:
                break
            yield line
        code = child.wait()
        if group is not None and (memory := group.usage()).limit_reached and code != 0:
            yield f"=== learner stopped on its node: {memory.reason()} ===\n".encode()
        if sandbox_json is not None:
            yield (_EXIT, sandbox.exit_status(code)[0])
        else:
            yield (_EXIT, code if code >= 0 else 128 - code)
    finally:  # cancelled (or the driver went away): the learner must not outlive the task
        if child.poll() is None:
            if sandbox_json is not None:  # to the learner, not to bubblewrap (kills at once)
                sandbox.signal_inside(child.pid, signal.SIGTERM)
            else:
                child.terminate()
            try:
                child.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
        if group is not None:
            group.remove()


def learner_environment(env_file: str | None) -> dict[str, str]:
    """The learner's environment: the service's file (read once, then removed), else this
    process's own (a driver started by hand)."""
    if env_file is None:
        return dict(os.environ)
    with open(env_file, encoding="utf-8") as handle:
        env = {str(k): str(v) for k, v in json.load(handle).items()}
    os.unlink(env_file)
    return env


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


def unplaceable_reason(
    cpus: float, gpus: int, mem_mb: int, node: str | None, totals: Sequence[Mapping[str, float]]
) -> str | None:
    """None when some alive node's total resources (``totals``, one mapping per node, Ray's
    names) cover the task's; else why none does. Ray would keep such a task pending for
    ever, and the job would sit in PROCESSING with an empty log."""
    wanted = {"CPU": cpus, "GPU": float(gpus), "memory": mem_mb * 1024.0 * 1024.0}
    if node:
        wanted[node_resource(node)] = 0.001
    wanted = {name: amount for name, amount in wanted.items() if amount > 0}
    if any(all(t.get(name, 0.0) >= amount for name, amount in wanted.items()) for t in totals):
        return None
    return (
        f"no alive node of the cluster ({len(totals)} alive) has {_asked(cpus, gpus, mem_mb, node)}"
    )


def _asked(cpus: float, gpus: int, mem_mb: int, node: str | None) -> str:
    return f"{cpus:g} CPU, {gpus} GPU, {mem_mb} MiB memory" + (f", node {node}" if node else "")


_END = object()


class _Signals:
    """The first SIGTERM/SIGINT received; the handler only records it (raising inside
    ``ray.wait`` would break Ray's C++ call), the loop looks between waits."""

    def __init__(self) -> None:
        self.received: int | None = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs its own
            signal.signal(sig, self._record)

    def _record(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum


def _next_item(stream: Any, signals: _Signals | None, deadline: float = float("inf")) -> object:
    """The stream's next item, ``_END`` at its end, past ``deadline`` or on a signal. It
    waits in ``_POLL_S`` slices: a blocking ``next`` would keep a halt waiting for the
    SIGKILL while a quiet learner prints nothing."""
    while time.monotonic() < deadline and (signals is None or signals.received is None):
        ready, _ = ray.wait([stream], timeout=_POLL_S)
        if ready:
            try:
                ref = next(stream)
            except StopIteration:
                return _END
            remaining = deadline - time.monotonic()
            return ray.get(ref, timeout=None if remaining == float("inf") else max(0.1, remaining))
    return _END


def _is_exit(item: object) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and item[0] == _EXIT


def _cancel(stream: Any, out: IO[bytes]) -> None:
    """Cancel the task: the learner gets SIGTERM on its node and ``_TERM_GRACE_S`` to stop,
    its last output still reaches the log; a task still running after that is killed
    (force), and Ray ends the processes its worker started."""
    ray.cancel(stream)
    deadline = time.monotonic() + _TERM_GRACE_S + 1.0
    try:
        while (item := _next_item(stream, None, deadline)) is not _END and not _is_exit(item):
            assert isinstance(item, bytes)
            out.write(item)
        if time.monotonic() >= deadline:
            ray.cancel(stream, force=True)
    except ray.exceptions.RayError as exc:  # the task ended cancelled: what was asked
        log.debug("learner task ended by its cancel: %s", type(exc).__name__)


def run(args: argparse.Namespace) -> int:
    ray_logs.keep_beside_job()
    ensure_ray(address=args.address)
    out = sys.stdout.buffer
    totals = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    reason = unplaceable_reason(args.cpus, args.gpus, args.mem_mb, args.node, totals)
    if reason is not None:
        out.write(f"=== cannot place the learner task: {reason} ===\n".encode())
        return UNPLACEABLE
    signals = _Signals()
    signals.install()
    remote: Any = ray.remote(run_learner_on_node).options(
        **task_options(args.cpus, args.gpus, args.mem_mb, args.node)
    )
    # The learner's environment as the service built it (RAY_ADDRESS included for trusted
    # tenants: a learner that uses Ray joins the service's cluster from its node; a
    # sandboxed one cannot reach it and starts its own inside its sandbox).
    env = learner_environment(args.env_file)
    limits = from_options(args)
    stream: Any = remote.remote(args.argv, args.cwd or os.getcwd(), env, limits, args.sandbox)
    # Until a node has the resources free the task waits; the log says for what.
    asked = _asked(args.cpus, args.gpus, args.mem_mb, args.node)
    out.write(f"=== learner task submitted: waiting for a node with {asked} ===\n".encode())
    out.flush()
    try:
        while (item := _next_item(stream, signals)) is not _END:
            if _is_exit(item):
                assert isinstance(item, tuple)
                return int(item[1])
            assert isinstance(item, bytes)
            out.write(item)
            out.flush()
    except ray.exceptions.RayError as exc:
        out.write(f"learner task failed on the cluster: {type(exc).__name__}: {exc}\n".encode())
        return 1
    if signals.received is not None:
        signum = signals.received
        out.write(f"=== cancelling the learner task (signal {signum}) ===\n".encode())
        out.flush()
        # Bounded: in the full test suite a cancel has been seen to hang past the collector's
        # grace (the learner itself had ended); the driver still records its exit in time.
        canceller = threading.Thread(target=_cancel, args=(stream, out), daemon=True)
        canceller.start()
        canceller.join(_TERM_GRACE_S + 3.0)
        out.write(f"learner task cancelled by signal {signum}\n".encode())
        out.flush()
        return 128 + signum
    out.write(b"learner task ended without an exit status\n")
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-ray-learner")
    parser.add_argument("--address", required=True)
    parser.add_argument("--cpus", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--node", default=None)
    add_limit_options(parser)
    parser.add_argument("--cwd", default=None)
    parser.add_argument("--env-file", default=None, help="the learner's environment (JSON)")
    parser.add_argument("--sandbox", default=None, help="the learner's SandboxSpec (JSON)")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    if not args.argv:
        parser.error("no learner command after --")
    return run(args)


def _exit_now(code: int) -> None:
    """Leave without Ray's shutdown: after a cancelled streaming task it can hang for a minute
    on a loaded host (seen in CI: the collector then needed the SIGKILL and the exit status
    was lost). The cluster notices the driver's exit itself; what matters is the status."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        status = main()
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    _exit_now(status)
