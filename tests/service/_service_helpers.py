"""Shared helpers of the job-service tests."""

from __future__ import annotations

import sys

from deepedge.service.manifest import JobManifest, parse_manifest


def demo_manifest(steps: int = 5, step_s: float = 0.05, **fields: object) -> JobManifest:
    """A command job running the checkpointing demo learner."""
    argv = [sys.executable, "-m", "deepedge.service.demo_learner", "--steps", str(steps),
            "--step-s", str(step_s)]  # fmt: skip
    extra = fields.pop("extra_argv", [])
    document = {"name": "demo", "kind": "command", "resources": {"cpus": 0.5, "mem_mb": 4096},
                "spec": {"argv": argv + list(extra)}, **fields}  # type: ignore[operator]  # fmt: skip
    return parse_manifest(document)
