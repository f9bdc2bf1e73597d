"""A small checkpointing learner for trying the service and for its benchmark.

``python -m deepedge.service.demo_learner --steps N --step-s T [--fail-at-step K]``

It counts ``N`` steps of ``T`` seconds of work each, saves its step counter whenever the
service asks (:class:`~deepedge.service.checkpoints.CheckpointAgent`), resumes from the
checkpoint it is handed after a restart, reports one metric line per step, and appends one
line per step to ``progress.log`` in its working directory (which lets a test count how
often each step really ran).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from deepedge.service.checkpoints import CheckpointAgent


def _busy(seconds: float) -> None:
    """Sleep rather than spin: the demo must not steal cores from other jobs."""
    time.sleep(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-demo-learner")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--fail-at-step", type=int, default=None)
    args = parser.parse_args(argv)
    agent = CheckpointAgent.from_env()
    state = agent.resume()
    step = int(json.loads(state)["step"]) if state else 0
    print(f"learner pid {os.getpid()} starting at step {step}", flush=True)
    metrics_path = os.environ.get("DEEPEDGE_METRICS_FILE")
    while step < args.steps:
        if args.fail_at_step is not None and step == args.fail_at_step:
            print(f"failing on purpose at step {step}", file=sys.stderr, flush=True)
            return 1
        _busy(args.step_s)
        step += 1
        with open("progress.log", "a", encoding="utf-8") as progress:
            progress.write(f"{step} {os.getpid()}\n")
        if metrics_path:
            with open(metrics_path, "a", encoding="utf-8") as metrics:
                metrics.write(json.dumps({"step": step, "at": time.time()}) + "\n")
        if agent.requested():
            saved = agent.save(json.dumps({"step": step}).encode())
            print(f"checkpoint {saved.name} at step {step}", flush=True)
    print(f"done after {step} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
