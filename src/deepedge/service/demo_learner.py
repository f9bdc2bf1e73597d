"""A small checkpointing learner for trying the service and for its benchmark.

``python -m deepedge.service.demo_learner --steps N --step-s T [--fail-at-step K]``

It counts ``N`` steps of ``T`` seconds each (or, with ``--train``, ``N`` epochs of a small
torch classifier on scikit-learn's bundled digits: real CPU work), saves its step counter
whenever the service asks (:class:`~deepedge.service.checkpoints.CheckpointAgent`), resumes from the
checkpoint it is handed after a restart, reports one metric line per step, and appends one
line per step to ``progress.log`` in its working directory (which lets a test count how
often each step really ran).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from deepedge.service.checkpoints import CheckpointAgent

log = logging.getLogger(__name__)


class DigitsTrainer:
    """One step = one epoch of SGD for a 64-128-10 MLP on the 1797 bundled digits."""

    def __init__(self, seed: int = 0) -> None:
        import torch
        from sklearn.datasets import load_digits

        torch.manual_seed(seed)
        torch.set_num_threads(1)  # steady timing on shared cores
        digits = load_digits()
        self.torch = torch
        self.x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
        self.y = torch.tensor(digits.target, dtype=torch.long)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)

    def epoch(self, batch_size: int = 32) -> float:
        order = self.torch.randperm(len(self.x))
        loss_sum = 0.0
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            self.optimizer.zero_grad()
            loss = self.torch.nn.functional.cross_entropy(self.model(self.x[idx]), self.y[idx])
            loss.backward()
            self.optimizer.step()
            loss_sum += float(loss.detach()) * len(idx)
        return loss_sum / len(order)


def _log_to_job_streams() -> None:
    """The learner's log is the job's: info to stdout, errors to stderr, both collected."""
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.ERROR)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.ERROR)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[out, err])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-demo-learner")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--fail-at-step", type=int, default=None)
    parser.add_argument("--train", action="store_true", help="real training epochs as steps")
    args = parser.parse_args(argv)
    _log_to_job_streams()
    trainer = DigitsTrainer() if args.train else None
    agent = CheckpointAgent.from_env()
    state = agent.resume()
    step = int(json.loads(state)["step"]) if state else 0
    log.info("learner pid %d starting at step %d", os.getpid(), step)
    metrics_path = os.environ.get("DEEPEDGE_METRICS_FILE")
    while step < args.steps:
        if args.fail_at_step is not None and step == args.fail_at_step:
            log.error("failing on purpose at step %d", step)
            return 1
        if trainer is not None:
            loss = trainer.epoch()
        else:
            time.sleep(args.step_s)  # sleep, not spin: the demo must not steal shared cores
            loss = 0.0
        step += 1
        with open("progress.log", "a", encoding="utf-8") as progress:
            progress.write(f"{step} {os.getpid()}\n")
        if metrics_path:
            with open(metrics_path, "a", encoding="utf-8") as metrics:
                metrics.write(json.dumps({"step": step, "loss": loss, "at": time.time()}) + "\n")
        if agent.requested():
            saved = agent.save(json.dumps({"step": step}).encode())
            log.info("checkpoint %s at step %d", saved.name, step)
    log.info("done after %d steps", step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
