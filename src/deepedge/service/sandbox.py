"""What a tenant's code may see and use: the sandbox policy of the job service.

Every way tenant code enters the service (a ``command`` job, the learner of a
``model-update``, ``ekya-window`` or ``placement`` job that imports the tenant's workload,
the check of a workload at submission, the control loop's use of a deployment's workload
-- labelling a window, the drift reference, the first version, loading a job's result or
an upload into the model, the export for serving: :mod:`deepedge.controlplane.tenant_workload`
-- and any other deepedge module run on tenant inputs through
:mod:`deepedge.service.sandbox_run`) runs through :func:`tenant_spec`, started by
:mod:`deepedge.core.sandbox` (bubblewrap):

=====================  ================================================================
user                   the tenant's own unprivileged uid (``tenants.uid``), no groups,
                       no capabilities, no new privileges, the filter of
                       :mod:`deepedge.core.seccomp`
files, read-only       the runtime (interpreter, packages, deepedge: :class:`Runtime`),
                       the folders the operator granted the tenant (``tenants.grants``),
                       a generated ``/etc`` (``passwd`` naming only the sandbox user)
files, writable        the job's own folders (work, results, checkpoints), or a module
                       run's own folder (``runs/<tenant>/<run>/out``, its inputs
                       read-only beside it), a private ``/tmp`` and ``/dev/shm`` of
                       bounded size
never visible          the service's data folder (store, tokens, logs, other jobs and
                       tenants), the host's ``/etc``, ``/home``, ``/root``, other
                       processes (own pid namespace)
network                none (own network namespace with only loopback); with the job's
                       ``api_access``, the API's Unix socket at :data:`SANDBOX_API_SOCKET`
                       and a token of the job's own (revoked when the job ends)
environment            built from nothing (:func:`tenant_env`): no variable of the service
limits                 the job's ``resources`` (address space, CPU time, open files,
                       processes of its user, file size, priority)
=====================  ================================================================

``Isolation.TRUSTED`` (``deepedge serve --trusted-tenants``) runs tenant code as the
service's own user with the service's environment, as before sandboxing existed: for one
tenant, or tenants who trust each other. The service refuses to start in the default
``SANDBOX`` mode where bubblewrap cannot run (:func:`unavailable_reason`).
"""

from __future__ import annotations

import enum
import functools
import glob
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import deepedge
from deepedge.core.limits import LearnerLimits
from deepedge.core.sandbox import TOOL, Bind, SandboxSpec, spawn
from deepedge.service.records import Tenant

log = logging.getLogger(__name__)

SANDBOX_API_SOCKET = "/run/deepedge/api.sock"  # where a sandbox sees the service's API
SANDBOX_USER = "tenant"  # its login name in the sandbox's /etc/passwd
SANDBOX_HOME = "/tmp"
# Harmless parts of the host's /etc that programs need (dynamic linker, time zone, CAs).
ETC_FROM_HOST = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "ssl",
                 "ca-certificates", "alternatives")  # fmt: skip
TOP_LEVEL_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
PROBE_TIMEOUT_S = 60.0


class Isolation(enum.StrEnum):
    SANDBOX = "sandbox"  # bubblewrap, a uid per tenant (the default)
    TRUSTED = "trusted"  # tenant code runs as the service (--trusted-tenants)


@dataclass(frozen=True)
class Runtime:
    """What every sandbox sees, read-only, to run Python and deepedge: ``/usr``, the top
    level links of a merged ``/usr`` (or the folders where it is not merged), the
    interpreter's prefixes, the deepedge package and a few files of ``/etc``."""

    binds: tuple[Bind, ...]
    symlinks: dict[str, str] = field(default_factory=dict)

    @classmethod
    @functools.cache
    def here(cls) -> Runtime:
        binds = [Bind("/usr", "/usr")]
        symlinks: dict[str, str] = {}
        for name in TOP_LEVEL_LINKS:
            path = Path("/") / name
            if path.is_symlink():
                symlinks[str(path)] = os.readlink(path)
            elif path.is_dir():
                binds.append(Bind(str(path), str(path)))
        package = str(Path(deepedge.__file__).parent)
        for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, package):
            # seen at the path Python knows it by, whatever links lead there on the host
            if not any(prefix == b.dest or prefix.startswith(b.dest + "/") for b in binds):
                binds.append(Bind(os.path.realpath(prefix), prefix))
        binds += [Bind(f"/etc/{n}", f"/etc/{n}") for n in ETC_FROM_HOST
                  if os.path.exists(f"/etc/{n}")]  # fmt: skip
        return cls(tuple(binds), symlinks)

    def overlap(self, folder: Path) -> str | None:
        """A runtime folder that holds ``folder`` or lies inside it, if any: a data folder
        there would be readable by every sandbox."""
        target = os.path.realpath(folder)
        for bind in self.binds:
            source = os.path.realpath(bind.source)
            if (
                target == source
                or target.startswith(source + "/")
                or source.startswith(target + "/")
            ):
                return bind.source
        return None


def unavailable_reason(data_dir: Path | None = None) -> str | None:
    """None when tenant code can be sandboxed here; else one sentence saying why not."""
    if shutil.which(TOOL) is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed: tenants' code cannot get users of its own"
    runtime = Runtime.here()
    if data_dir is not None and (inside := runtime.overlap(data_dir)) is not None:
        return f"the data folder {data_dir} overlaps {inside}, which every sandbox can read"
    spec = SandboxSpec(runtime.binds, "/tmp", 65534, 65534, symlinks=runtime.symlinks,
                       files=etc_files(65534))  # fmt: skip
    try:
        child = spawn(
            spec, [sys.executable, "-c", "import deepedge"], env=tenant_env({}),
            limits=LearnerLimits(mem_mb=4096), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        _, err = child.communicate(timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap cannot start a sandbox here: {exc}"
    if child.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        return f"bubblewrap cannot start a sandbox here: {last}"
    return None


def etc_files(uid: int) -> dict[str, str]:
    """The sandbox's own ``/etc`` entries: its user and group only, loopback names."""
    return {
        "/etc/passwd": f"{SANDBOX_USER}:x:{uid}:{uid}:deepedge tenant:{SANDBOX_HOME}:/bin/sh\n",
        "/etc/group": f"{SANDBOX_USER}:x:{uid}:\n",
        "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
        "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    }


def tenant_env(extra: Mapping[str, str]) -> dict[str, str]:
    """A sandboxed program's whole environment: a few neutral variables and ``extra``."""
    path = os.pathsep.join([f"{sys.prefix}/bin", "/usr/local/bin", "/usr/bin", "/bin"])
    return {
        "PATH": path, "HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "USER": SANDBOX_USER, "LOGNAME": SANDBOX_USER, "PYTHONDONTWRITEBYTECODE": "1",
        **extra,
    }  # fmt: skip


def gpu_devices() -> list[str]:
    """The host's NVIDIA device nodes (given to a sandbox that asked for GPUs)."""
    return sorted(glob.glob("/dev/nvidia*"))


def overlaps(a: Path | str, b: Path | str) -> bool:
    """One of the two folders holds the other (or they are the same)."""
    x, y = os.path.realpath(a), os.path.realpath(b)
    return x == y or x.startswith(y.rstrip("/") + "/") or y.startswith(x.rstrip("/") + "/")


def grant_problem(path: str, data_dir: Path | None) -> str | None:
    """Why ``path`` cannot be granted to a tenant (None: it can): it must be an absolute,
    existing path that neither holds nor lies in the service's data folder."""
    if not os.path.isabs(path):
        return f"{path}: a granted path must be absolute"
    if not os.path.exists(path):
        return f"{path}: no such file or folder"
    if data_dir is not None and overlaps(path, data_dir):
        return f"{path}: overlaps the service's data folder {data_dir} (store, tokens, jobs)"
    return None


def tenant_spec(
    tenant: Tenant,
    *,
    cwd: Path,
    writable: Sequence[Path],
    read_only: Sequence[Path] = (),
    api_socket: Path | None = None,
    gpus: bool = False,
    tmp_mb: int = 1024,
    data_dir: Path | None = None,
) -> SandboxSpec:
    """The sandbox of one run of ``tenant``'s code (the module docstring's table).

    A granted path that is missing here, or overlaps the service's ``data_dir``, is left
    out (and logged); ``writable`` and ``read_only`` must exist."""
    runtime = Runtime.here()
    binds = list(runtime.binds)
    for grant in tenant.grants:
        problem = grant_problem(grant, data_dir)
        if problem is None:
            binds.append(Bind(grant, grant))
        else:
            log.warning("tenant %s: grant left out: %s", tenant.name, problem)
    binds += [Bind(str(p), str(p)) for p in read_only]
    binds += [Bind(str(p), str(p), writable=True) for p in writable]
    if api_socket is not None:
        binds.append(Bind(str(api_socket), SANDBOX_API_SOCKET))
    if gpus:
        binds += [Bind(dev, dev, device=True) for dev in gpu_devices()]
    return SandboxSpec(
        binds=tuple(binds), cwd=str(cwd), uid=tenant.uid, gid=tenant.uid,
        files=etc_files(tenant.uid), symlinks=dict(runtime.symlinks), tmp_mb=tmp_mb,
    )  # fmt: skip


def give_to_tenant(tenant: Tenant, folders: Sequence[Path]) -> None:
    """Make the job's writable folders the tenant's (a root service only: elsewhere the
    sandbox's user is the service's own, mapped)."""
    if os.geteuid() != 0:
        return
    for folder in folders:
        os.lchown(folder, tenant.uid, tenant.uid)
        os.chmod(folder, 0o750, follow_symlinks=False)


def trusted_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Tenant code in trusted mode: the service's environment (less its own DEEPEDGE_*
    variables) and ``extra``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("DEEPEDGE_")}
    return {**base, **extra}


@dataclass(frozen=True)
class Confinement:
    """How this service runs tenant code: its isolation mode and the API's Unix socket
    (what a job with ``api_access`` may call, with its own token)."""

    isolation: Isolation
    api_socket: Path | None = None
    data_dir: Path | None = None  # never visible in a sandbox, whatever is granted

    @property
    def sandboxed(self) -> bool:
        return self.isolation is Isolation.SANDBOX

    def env(self, extra: Mapping[str, str]) -> dict[str, str]:
        """Tenant code's environment: built from nothing in a sandbox, the service's own
        (less its DEEPEDGE_* variables) when tenants are trusted."""
        return tenant_env(extra) if self.sandboxed else trusted_env(extra)

    def api_url(self) -> str:
        """Where tenant code finds the API (``deepedge jobs --url`` takes it)."""
        where = SANDBOX_API_SOCKET if self.sandboxed else str(self.api_socket)
        return f"unix:{where}"

    def spec(
        self,
        tenant: Tenant,
        *,
        cwd: Path,
        writable: Sequence[Path],
        read_only: Sequence[Path] = (),
        api: bool = False,
        gpus: bool = False,
        tmp_mb: int = 1024,
    ) -> SandboxSpec | None:
        """The sandbox of one run of ``tenant``'s code (None when tenants are trusted)."""
        if not self.sandboxed:
            return None
        socket = self.api_socket if api and self.api_socket is not None else None
        if socket is not None and not socket.exists():
            socket = None  # the API is not listening on it (a service without supervisor)
        return tenant_spec(tenant, cwd=cwd, writable=writable, read_only=read_only,
                           api_socket=socket, gpus=gpus, tmp_mb=tmp_mb,
                           data_dir=self.data_dir)  # fmt: skip


TRUSTED = Confinement(Isolation.TRUSTED)
