"""The embedded Ray head a service runs for its site, as recorded on disk.

With the data plane on and no Ray address given, the service starts one Ray head on this
machine (:mod:`deepedge.controlplane.serving_host`): the data plane serves there. Its
address, folder
and process are recorded in ``<data-dir>/dataplane/head.json`` so that a restarted process
re-attaches to it and anyone can stop it. The service's learners do not use it: they run
tenant code, in a sandbox with no network, and Ray runs whatever code it is given.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

HEAD_FILE = Path("dataplane") / "head.json"


@dataclass(frozen=True)
class HeadRecord:
    """An embedded head as recorded on disk (enough to re-attach to it or stop it)."""

    address: str
    root: str
    pid: int
    env: dict[str, str]
    state_dir: str | None = None  # the data plane's own files beside Ray's (HAProxy's)

    def alive(self) -> bool:
        host, _, port = self.address.rpartition(":")
        if not psutil.pid_exists(self.pid):
            return False
        try:
            socket.create_connection((host, int(port)), timeout=1.0).close()
        except OSError:
            return False
        return True


def read_head(data_dir: Path) -> HeadRecord | None:
    try:
        raw = json.loads((data_dir / HEAD_FILE).read_text())
        return HeadRecord(raw["address"], raw["root"], int(raw["pid"]), dict(raw["env"]),
                          raw.get("state_dir"))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_head(data_dir: Path, record: HeadRecord) -> None:
    path = data_dir / HEAD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(record)))
    os.replace(tmp, path)


def forget_head(data_dir: Path) -> None:
    (data_dir / HEAD_FILE).unlink(missing_ok=True)


def stop_head(record: HeadRecord) -> None:
    """Stop a recorded head and everything that runs under it (its raylet's workers too,
    which rename themselves ``ray::...``) or from its folder."""
    from deepedge.runtime.cluster.local_cluster import LocalRayCluster

    try:
        tree = psutil.Process(record.pid).children(recursive=True)
    except psutil.Error:
        tree = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGTERM)
    with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
        psutil.Process(record.pid).wait(timeout=5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGKILL)
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for _ in range(2):  # a worker dying as it was killed may just have started a process
        for proc in session_processes(record.pid):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        time.sleep(0.5)
    LocalRayCluster.kill_leftovers(record.root)
    shutil.rmtree(record.root, ignore_errors=True)
    if record.state_dir:
        LocalRayCluster.kill_leftovers(record.state_dir)  # (HAProxy names its config)
        shutil.rmtree(record.state_dir, ignore_errors=True)


def session_processes(sid: int) -> list[psutil.Process]:
    """The running processes (zombies aside) of session ``sid``: a head's ``ray start``
    leads one (it starts in a session of its own), and every process of the head stays in
    it, Ray's workers (each in a process group of its own, out of reach of the head's) and
    what they start (Serve's HAProxy, which a worker can start as it is being stopped, and
    which then listened on after the head was gone)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if (proc.pid != os.getpid() and os.getsid(proc.pid) == sid
                    and proc.status() != psutil.STATUS_ZOMBIE):  # fmt: skip
                found.append(proc)
    return found
