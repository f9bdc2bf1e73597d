"""Ekya's retraining window: which streams to retrain, with which configuration and what GPU
share, so that the window's inference accuracy is the highest (the documents, EstimateAccuracy,
the thief scheduler, the uniform baseline, the exact oracle, GPU packing, configuration
pruning and the online calibration of the micro-profiler's estimates).

A window policy is a :class:`WindowScheduler`: ``plan(problem) -> WindowPlan``; the same
object drives the simulator, the benchmarks, the job service and the live edge server. Every
caller builds its scheduler by name from :data:`WINDOW_SCHEDULERS` (the keys are the
:class:`SchedulerKind` members), giving it the :class:`SchedulerOptions` it was asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from deepedge.core.errors import InvalidInputError
from deepedge.core.registry import look_up
from deepedge.planning.window.accuracy import Horizon
from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem
from deepedge.planning.window.oracle import OracleScheduler
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.planning.window.uniform import UniformScheduler


class WindowScheduler(Protocol):
    """A window policy: ``plan(problem) -> decision``; the same object drives sim and runtime."""

    @property
    def kind(self) -> SchedulerKind: ...

    def plan(self, problem: WindowProblem) -> WindowPlan: ...


@dataclass(frozen=True)
class SchedulerOptions:
    """What a scheduler is built with; each scheduler reads the fields it needs."""

    horizon: Horizon | None = None  # thief, oracle: the horizon objective (None: per window)
    uniform_config: str | None = None  # uniform: the one retraining configuration
    inference_share: float = 0.5  # uniform: each stream's inference share, in [0, 1]


def _thief(options: SchedulerOptions) -> WindowScheduler:
    return ThiefScheduler(horizon=options.horizon)


def _oracle(options: SchedulerOptions) -> WindowScheduler:
    return OracleScheduler(horizon=options.horizon)


def _uniform(options: SchedulerOptions) -> WindowScheduler:
    share = options.inference_share
    if not 0.0 <= share <= 1.0:
        raise InvalidInputError(f"inference share {share} not in [0, 1]", field="inference_share")
    if options.uniform_config is None:
        raise InvalidInputError(
            "the uniform scheduler needs a retraining configuration", field="uniform_config"
        )
    return UniformScheduler(options.uniform_config, share)


WINDOW_SCHEDULERS: Mapping[SchedulerKind, Callable[[SchedulerOptions], WindowScheduler]] = {
    SchedulerKind.THIEF: _thief,  # Ekya's thief scheduler and PickConfigs
    SchedulerKind.UNIFORM: _uniform,  # the paper's baseline: one config, fixed shares
    SchedulerKind.ORACLE: _oracle,  # exact on the quantised allocation grid
}


def window_scheduler(
    name: SchedulerKind | str, options: SchedulerOptions | None = None
) -> WindowScheduler:
    """The scheduler called ``name`` built with ``options``; an unknown name is bad input."""
    build = look_up(WINDOW_SCHEDULERS, SchedulerKind, name, "window scheduler", "scheduler")
    return build(options if options is not None else SchedulerOptions())
