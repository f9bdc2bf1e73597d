"""The uniform baseline ("Uniform (Config, x%)", Ekya Sec. 3.2 and 6.1).

Every stream gets ``G / n`` GPUs; a stream that retrains gives the fraction ``x`` of its share
to inference and ``1 - x`` to retraining with one fixed configuration (looked up by name), and
a stream with nothing (left) to retrain gives its whole share to inference. The inference job
runs the most accurate configuration that keeps up within its share; the baseline ignores
``a_min`` and keeps a retraining running even when it cannot finish within the window. Once the
retraining finishes, its share goes back to the stream's inference job.
"""

from __future__ import annotations

from dataclasses import dataclass

from deepedge.planning.window.accuracy import StreamChoice, estimate_accuracy
from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem
from deepedge.planning.window.thief import plan_from_choices


@dataclass(frozen=True)
class UniformScheduler:
    """Fixed retraining config ``config_name`` and fixed inference share ``inference_share``."""

    config_name: str
    inference_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.inference_share <= 1.0:
            raise ValueError(f"inference_share {self.inference_share} not in [0, 1]")

    @property
    def kind(self) -> SchedulerKind:
        return SchedulerKind.UNIFORM

    def choices(self, problem: WindowProblem) -> list[StreamChoice]:
        share = problem.gpus / len(problem.streams)
        out: list[StreamChoice] = []
        for stream in problem.streams:
            config = next(
                (c for c in stream.retraining_configs if c.name == self.config_name), None
            )
            if config is None:
                choice = estimate_accuracy(stream, None, share, 0.0, problem.window_s, None)
            else:
                choice = estimate_accuracy(
                    stream,
                    config,
                    self.inference_share * share,
                    (1.0 - self.inference_share) * share,
                    problem.window_s,
                    None,
                )
            assert choice is not None  # without the floor every option is allowed
            out.append(choice)
        return out

    def plan(self, problem: WindowProblem) -> WindowPlan:
        """The uniform plan; it never raises for ``a_min`` (the baseline ignores the floor)."""
        relaxed = problem.model_copy(update={"a_min": 0.0})
        return plan_from_choices(relaxed, self.kind, self.choices(problem))
