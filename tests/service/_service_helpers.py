"""Shared helpers of the job-service tests."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import psutil

from _support import wait_until
from deepedge.service.manifest import JobManifest, parse_manifest


def demo_manifest(steps: int = 5, step_s: float = 0.05, **fields: object) -> JobManifest:
    """A command job running the checkpointing demo learner."""
    argv = [sys.executable, "-m", "deepedge.service.demo_learner", "--steps", str(steps),
            "--step-s", str(step_s)]  # fmt: skip
    extra = fields.pop("extra_argv", [])
    document = {"name": "demo", "kind": "command", "resources": {"cpus": 0.5, "mem_mb": 4096},
                "spec": {"argv": argv + list(extra)}, **fields}  # type: ignore[operator]  # fmt: skip
    return parse_manifest(document)


def tick_until(manager: Any, predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Run manager ticks (no background thread) until ``predicate`` holds."""

    def ticked() -> bool:
        manager.tick()
        return predicate()

    return wait_until(ticked, timeout_s)


def learner_pids(job_dir: Any) -> list[int]:
    """Live learner processes recorded in the job's pid files."""
    pids = []
    for pid_file in sorted(job_dir.status.glob("*.pid")):
        record = json.loads(pid_file.read_text())
        try:
            proc = psutil.Process(record["learner_pid"])
            if proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return pids
