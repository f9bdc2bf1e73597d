"""The one entry point for running deepedge code on a tenant's inputs inside its sandbox.

Anything that must import or call tenant code outside a job -- checking a workload at
submission, labelling a window with the tenant's labeller, training a first version,
exporting a model to TorchScript, building a model for scoring -- runs a deepedge module
here instead of importing the code in a service process::

    runner = SandboxRunner.for_service(settings)
    with runner.run_module(tenant, "deepedge.workload.check", ["-"], stdin=document) as run:
        run.check()                      # TenantCodeError with the module's last words
        summary = json.loads(run.stdout)
        weights = run.output("weights.npy")   # a file the module wrote in its folder

The module runs as ``python -m MODULE ARGS`` in a fresh folder of its own
(``<data>/runs/<tenant>/<run>/out``, its working directory, writable), with each of
``inputs`` (host paths, given by the caller) bound read-only at ``../in/<name>``, the
tenant's granted folders read-only, no network, the given limits (its memory, ``/tmp`` and
``/dev/shm`` included, in a memory cgroup of its own where one can be made) and a timeout;
it may write only its folder (and its private ``/tmp``). :meth:`ModuleRun.output` reads what it
wrote without following links. The folder is removed when the ``with`` block ends.

In trusted mode (``--trusted-tenants``) the same call runs the module as the service's own
user, in the same folders, without a sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deepedge.core import memory_cgroup
from deepedge.core.errors import TenantCodeError
from deepedge.core.limits import LearnerLimits
from deepedge.core.memory_cgroup import MemoryCgroup
from deepedge.core.sandbox import Bind, exit_status
from deepedge.service.config import ServiceSettings
from deepedge.service.durable_files import write_private
from deepedge.service.records import Tenant
from deepedge.service.sandbox import Confinement, give_to_tenant
from deepedge.service.workspace import open_inside

log = logging.getLogger(__name__)

MAX_OUTPUT_B = 8 << 20  # stdout and stderr kept per run (the rest is dropped)
# RLIMIT_NPROC counts every process and thread of the tenant's uid, its jobs' included: a
# run of the service's own (labelling a window, exporting a version) allowed 256 failed to
# start ("setpriv: failed to execute /bin/sh: Resource temporarily unavailable") while two
# of the tenant's update jobs ran their embedded Ray, and a trained version was lost
# (bench.byo, 2026-11-28). Such runs get the most a job may ask for: the tenant's jobs
# cannot starve them, and a fork bomb still stops there.
TASK_MAX_PROCESSES = 4096
DEFAULT_LIMITS = LearnerLimits(mem_mb=8192, cpu_time_s=600, nofile=1024,
                               max_processes=TASK_MAX_PROCESSES, max_file_mb=4096)  # fmt: skip
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ModuleRun:
    """What one sandboxed run did: its exit status, its output, the folder it wrote."""

    module: str
    exit_code: int
    signal: int | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    out_dir: Path
    limit_reason: str = ""  # "memory limit ... reached (peak ...)": its cgroup's OOM killer

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def last_words(self) -> str:
        text = (self.stderr or self.stdout).decode("utf-8", "replace").strip()
        return (text.splitlines() or ["no output"])[-1][:500]

    def check(self) -> ModuleRun:
        """This run, or :class:`TenantCodeError` saying how it ended."""
        if self.timed_out:
            raise TenantCodeError(f"{self.module} ran out of time in the tenant's sandbox")
        if self.exit_code != 0:
            how = f"signal {self.signal}" if self.signal else f"exit code {self.exit_code}"
            words = self.limit_reason or self.last_words()
            raise TenantCodeError(f"{self.module} ended with {how}: {words}")
        return self

    def output(self, relative: str, limit_b: int | None = None) -> bytes:
        """A file the module wrote under its folder (no link followed)."""
        with open_inside(self.out_dir, relative) as handle:
            return handle.read() if limit_b is None else handle.read(limit_b)


@dataclass(frozen=True)
class SandboxRunner:
    confinement: Confinement
    runs_dir: Path  # <data>/runs: never visible to a sandbox but through its own folder

    @classmethod
    def for_service(cls, settings: ServiceSettings) -> SandboxRunner:
        """The runner of a service: its isolation mode, its ``runs`` folder."""
        return cls(settings.confinement(), settings.data_dir / "runs")

    @contextmanager
    def run_module(
        self,
        tenant: Tenant,
        module: str,
        args: Sequence[str] = (),
        *,
        inputs: Mapping[str, Path] | None = None,
        stdin: bytes = b"",
        env: Mapping[str, str] | None = None,
        limits: LearnerLimits = DEFAULT_LIMITS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> Iterator[ModuleRun]:
        """Run ``python -m module args`` for ``tenant`` (module docstring); yields the
        finished :class:`ModuleRun`, whose folder is removed afterwards."""
        folder = self.runs_dir / tenant.id / uuid.uuid4().hex
        out_dir, in_dir = folder / "out", folder / "in"
        out_dir.mkdir(parents=True, mode=0o750)
        in_dir.mkdir(mode=0o750)
        try:
            run = self._run(tenant, module, args, folder, dict(inputs or {}), stdin,
                            dict(env or {}), limits, timeout_s)  # fmt: skip
            yield run
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _run(
        self,
        tenant: Tenant,
        module: str,
        args: Sequence[str],
        folder: Path,
        inputs: dict[str, Path],
        stdin: bytes,
        env: dict[str, str],
        limits: LearnerLimits,
        timeout_s: float,
    ) -> ModuleRun:
        out_dir, in_dir = folder / "out", folder / "in"
        argv = [sys.executable, "-m", module, *args]
        environment = self.confinement.env(env)
        for name in inputs:
            if "/" in name or name in {"", ".", ".."}:
                raise ValueError(f"input name {name!r} must be a plain file name")
        spec = self.confinement.spec(
            tenant, cwd=out_dir, writable=[out_dir], tmp_mb=min(1024, limits.mem_mb)
        )
        group: MemoryCgroup | None = None
        if spec is None:  # trusted: the inputs are links, the module runs as the service
            for name, path in inputs.items():
                (in_dir / name).symlink_to(Path(path).resolve())
            command = argv
            popen_env = environment
        else:
            give_to_tenant(tenant, [out_dir])
            binds = [Bind(str(Path(p).resolve()), str(in_dir / n)) for n, p in inputs.items()]
            spec = dataclasses.replace(spec, binds=spec.binds + tuple(binds))
            env_file = folder / "env.json"
            write_private(env_file, environment)
            group = memory_cgroup.for_run(limits.mem_mb)
            joined = ["--cgroup", str(group.path)] if group is not None else []
            command = [sys.executable, "-I", "-m", "deepedge.core.sandbox",
                       "--spec", spec.to_json(), "--env-file", str(env_file), *joined,
                       *limits.argv(), "--", *argv]  # fmt: skip
            popen_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        try:
            child = subprocess.Popen(
                command, cwd=out_dir, env=popen_env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            timed_out = False
            try:
                out, err = child.communicate(stdin, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(child.pid)
                out, err = child.communicate()
            memory = group.usage() if group is not None else None
        finally:
            if group is not None:
                group.remove()
        code, killed_by = exit_status(child.returncode) if spec else _plain(child.returncode)
        reason = memory.reason() if memory is not None and memory.limit_reached else ""
        return ModuleRun(module, code, killed_by, timed_out, out[:MAX_OUTPUT_B],
                         err[-MAX_OUTPUT_B:], out_dir, reason if code != 0 else "")  # fmt: skip


def _plain(code: int) -> tuple[int, int | None]:
    return (128 - code, -code) if code < 0 else (code, None)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def summary_json(run: ModuleRun) -> dict[str, object]:
    """The last line of a module's standard output as a JSON object (the convention of
    deepedge's check modules), or an empty one."""
    lines = run.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
