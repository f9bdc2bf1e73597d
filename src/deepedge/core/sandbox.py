"""Starting one command inside a bubblewrap sandbox: the mechanism.

What a tenant's code may see is decided by the service (:mod:`deepedge.service.sandbox`,
the policy); this module only turns a :class:`SandboxSpec` (plain data, a JSON round trip, so
it can travel on a command line or to a Ray task on another node) into a running process:

* new pid, network, IPC, UTS and cgroup namespaces and a mount namespace whose root is
  empty but for the binds the spec names (read-only unless marked writable), a private
  ``/tmp`` and ``/dev/shm`` of bounded size and ``/proc`` of its own pid namespace;
* small files (``/etc/passwd`` of the sandbox user, ``/etc/hosts``) are copied in from
  memory (``--ro-bind-data`` of a ``memfd``), never from the host's ``/etc``;
* the system-call filter of :mod:`deepedge.core.seccomp` (no namespaces or mounts of its
  own, no keyrings, ...);
* the user: a root starter runs bubblewrap privileged (it can reach the interpreter even
  under ``/root``) and the command through ``setpriv`` as the spec's unprivileged uid with
  no capabilities, an empty bounding set and no supplementary groups; any other starter
  runs bubblewrap in a user namespace of its own (``--disable-userns``), its uid mapped;
* the process limits (:class:`~deepedge.core.limits.LearnerLimits`) apply to bubblewrap
  and hence to everything in the sandbox; given a memory cgroup
  (:mod:`deepedge.core.memory_cgroup`), bubblewrap joins it before it executes, so the
  sandbox's processes and the tmpfs pages they write are charged there together;
* bubblewrap starts in a process group of its own, so a graceful stop
  (:func:`signal_inside`) reaches the sandboxed processes without ending bubblewrap first
  (which would SIGKILL them at once: ``--die-with-parent``).

Standard library only: the collector imports it and must start fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from deepedge.core.limits import LearnerLimits
from deepedge.core.memory_cgroup import MemoryCgroup, join

TOOL = "bwrap"
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
ENV_FILE = "/run/deepedge/environment"  # the sandboxed command's variables (privileged start)
SIGNAL_BASE = 128  # bubblewrap exits 128 + n when a signal n ended the sandboxed command


@dataclass(frozen=True)
class Bind:
    """``source`` on the host seen at ``dest`` in the sandbox."""

    source: str
    dest: str
    writable: bool = False
    device: bool = False  # a device node (a GPU): bound with device access


@dataclass(frozen=True)
class SandboxSpec:
    """Everything the sandbox contains; nothing else of the host is visible in it."""

    binds: tuple[Bind, ...]
    cwd: str
    uid: int  # the user inside (and outside, when the starter switches to it)
    gid: int
    files: dict[str, str] = field(default_factory=dict)  # dest -> content, read-only
    symlinks: dict[str, str] = field(default_factory=dict)  # dest -> target (/bin -> usr/bin)
    tmp_mb: int = 1024  # size of /tmp and of /dev/shm each
    hostname: str = "deepedge-sandbox"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SandboxSpec:
        raw: dict[str, Any] = json.loads(text)
        raw["binds"] = tuple(Bind(**b) for b in raw.get("binds", ()))
        return cls(**raw)


@dataclass
class Prepared:
    """The bubblewrap command line and the descriptors it refers to (closed by ``close``)."""

    argv: list[str]
    fds: list[int]

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _data_fd(content: str | bytes) -> int:
    fd = os.memfd_create("deepedge-sandbox-file", 0)
    os.write(fd, content if isinstance(content, bytes) else content.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _ancestors(paths: list[str]) -> list[str]:
    """Every folder above ``paths`` (shallowest first): created world-traversable in the
    sandbox, whatever their modes on the host (``/root`` is 0700 there)."""
    found: set[str] = set()
    for path in paths:
        parts = [p for p in path.split("/") if p]
        found.update("/" + "/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(found, key=lambda p: (p.count("/"), p))


def prepare(
    spec: SandboxSpec, argv: Sequence[str], env: Mapping[str, str], tool: str = TOOL
) -> Prepared:
    """The bubblewrap command line for ``argv`` with exactly ``env``, and the descriptors it
    reads (pass them with ``pass_fds``; :meth:`Prepared.close` after the start).

    The options travel in a memory file (``--args FD``), so neither the environment (a
    job's token) nor the binds show on the host's process list. No process that runs with
    more rights than the tenant sees a variable of ``env`` (a tenant's ``LD_PRELOAD`` would
    run its code there): bubblewrap starts with a clean environment and, as root, runs
    ``setpriv`` with ``PATH`` alone; after the user switch a shell reads ``env`` from a
    read-only file of the sandbox (:data:`ENV_FILE`) and executes ``argv``."""
    from deepedge.core.seccomp import program

    if not argv:
        raise ValueError("sandbox: no command")
    privileged = os.geteuid() == 0
    size_b = str(spec.tmp_mb * 1024 * 1024)
    args = [
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--die-with-parent", "--hostname", spec.hostname, "--clearenv",
    ]  # fmt: skip
    if privileged:
        # setpriv needs these three to switch user and empty its bounding set; the switch to
        # a non-zero uid then clears every capability
        args += ["--setenv", "PATH", SAFE_PATH, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                 "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]  # fmt: skip
        files = {**spec.files, ENV_FILE: _shell_assignments(env)}
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(spec.uid),
                 "--gid", str(spec.gid)]  # fmt: skip
        for name, value in sorted(env.items()):
            args += ["--setenv", name, value]
        files = dict(spec.files)
    args += ["--proc", "/proc", "--dev", "/dev"]
    for scratch in ("/tmp", "/dev/shm"):  # sticky and world-writable, as on any host
        args += ["--perms", "1777", "--size", size_b, "--tmpfs", scratch]
    dests = [b.dest for b in spec.binds] + list(files)
    for folder in _ancestors(dests):
        if folder not in spec.symlinks:
            args += ["--perms", "0755", "--dir", folder]
    for dest, target in sorted(spec.symlinks.items()):
        args += ["--symlink", target, dest]
    for bind in spec.binds:
        if not os.path.exists(bind.source):
            raise FileNotFoundError(f"sandbox: {bind.source} does not exist")
        verb = "--dev-bind" if bind.device else "--bind" if bind.writable else "--ro-bind"
        args += [verb, bind.source, bind.dest]
    fds: list[int] = []
    try:
        for dest, content in sorted(files.items()):
            fds.append(_data_fd(content))
            args += ["--perms", "0444", "--ro-bind-data", str(fds[-1]), dest]
        bpf = program()
        if bpf is not None:
            fds.append(_data_fd(bpf))
            args += ["--seccomp", str(fds[-1])]
        if not privileged:  # as root it could not enter the tenant's 0750 folder: sh does
            args += ["--chdir", spec.cwd]
        fds.append(_data_fd(b"".join(a.encode() + b"\0" for a in args)))
    except BaseException:
        Prepared([], fds).close()
        raise
    command = [tool, "--args", str(fds[-1]), "--"]
    if privileged:
        command += ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.gid}", "--clear-groups",
                    "--inh-caps=-all", "--bounding-set=-all", "--",
                    "/bin/sh", "-c", f'set -a; . {ENV_FILE}; cd {_quoted(spec.cwd)} && exec "$@"',
                    "sandbox"]  # fmt: skip
    return Prepared([*command, *argv], fds)


def _shell_assignments(env: Mapping[str, str]) -> str:
    """``env`` as a file ``sh`` sources: ``NAME='value'``, quotes escaped (data, never code)."""
    lines = []
    for name, value in sorted(env.items()):
        if not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"sandbox: bad environment variable name {name!r}")
        lines.append(f"{name}={_quoted(value)}")
    return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def spawn(
    spec: SandboxSpec,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    limits: LearnerLimits,
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    tool: str = TOOL,
    cgroup: MemoryCgroup | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in the sandbox under ``limits`` (and in ``cgroup``, joined before
    bubblewrap executes), in a new process group; its environment is exactly ``env``."""
    prepared = prepare(spec, argv, env, tool)
    try:
        return subprocess.Popen(
            prepared.argv,
            env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=prepared.fds,
            preexec_fn=pre_exec(limits, cgroup),
            process_group=0,
            cwd="/",
        )
    finally:
        prepared.close()


def pre_exec(limits: LearnerLimits, cgroup: MemoryCgroup | None) -> Callable[[], None]:
    """What a child does between fork and exec: join ``cgroup`` (as its starter: joining
    needs the rights the sandboxed user lacks), then take on ``limits``."""

    def run() -> None:
        if cgroup is not None:
            cgroup.enter()
        limits.apply()

    return run


def signal_inside(leader: int, signum: int) -> None:
    """Send ``signum`` to every process of the sandbox started as ``leader`` (its process
    group) except bubblewrap's own monitor process, whose death would SIGKILL them all
    before they could act on it (a graceful stop)."""
    for pid in group_members(leader):
        if pid != leader:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def group_members(pgid: int) -> list[int]:
    """Processes whose process group is ``pgid`` (read from ``/proc``)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ")"
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def exit_status(code: int) -> tuple[int, int | None]:
    """``(exit_code, signal)`` of a sandboxed command from bubblewrap's exit status
    (``128 + n`` when signal ``n`` ended the command, as a shell reports it)."""
    if code < 0:
        return SIGNAL_BASE - code, -code
    signum = code - SIGNAL_BASE
    if 0 < signum < signal.NSIG:
        return code, signum
    return code, None


def main(argv: list[str] | None = None) -> None:
    """``python -m deepedge.core.sandbox --spec JSON --env-file F [--cgroup DIR] [limits] --
    argv``: join the memory cgroup at ``DIR`` (the caller made it, reads it back and removes
    it), apply the limits in this single-threaded process and become bubblewrap
    (``exec``), so that a threaded caller (the API) never runs code between its own fork
    and exec."""
    import argparse

    from deepedge.core.limits import add_limit_options, from_options

    parser = argparse.ArgumentParser(prog="deepedge-sandbox")
    parser.add_argument("--spec", required=True, help="a SandboxSpec as JSON")
    parser.add_argument("--env-file", required=True, help="the command's environment (JSON)")
    parser.add_argument("--cgroup", default=None, help="a memory cgroup's folder to join")
    add_limit_options(parser)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    with open(args.env_file, encoding="utf-8") as handle:
        env = {str(k): str(v) for k, v in json.load(handle).items()}
    os.unlink(args.env_file)
    prepared = prepare(SandboxSpec.from_json(args.spec), command, env)
    for fd in prepared.fds:
        os.set_inheritable(fd, True)
    if args.cgroup is not None:
        join(Path(args.cgroup))
    from_options(args).apply()
    os.execvpe(prepared.argv[0], prepared.argv, {"PATH": SAFE_PATH, "LANG": "C.UTF-8"})


if __name__ == "__main__":
    main()
