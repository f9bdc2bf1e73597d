"""A thief that keeps every problem it was asked to plan (the estimate-variant tests)."""

from __future__ import annotations

from deepedge.planning.window.documents import SchedulerKind, WindowPlan, WindowProblem
from deepedge.planning.window.thief import ThiefScheduler


class RecordingThief:
    """The thief, keeping every problem it was asked to plan."""

    def __init__(self) -> None:
        self.thief = ThiefScheduler()
        self.problems: list[WindowProblem] = []

    @property
    def kind(self) -> SchedulerKind:
        return self.thief.kind

    def plan(self, problem: WindowProblem) -> WindowPlan:
        self.problems.append(problem)
        return self.thief.plan(problem)
