"""The executor of an update's launches, by kind: Ray actors
(:mod:`deepedge.runtime.training.ray_launch`) or threads of the update's process
(:mod:`deepedge.runtime.training.thread_launch`), both behind
:mod:`deepedge.runtime.training.update_launch`'s
interface (which neither of them, nor this, makes it import)."""

from __future__ import annotations

from deepedge.runtime.training.update_config import UpdateExecutor
from deepedge.runtime.training.update_launch import Executor


def executor(kind: UpdateExecutor) -> Executor:
    """The executor of ``kind``; Ray is imported only for :attr:`UpdateExecutor.RAY`."""
    if kind is UpdateExecutor.RAY:
        from deepedge.runtime.training.ray_launch import RayExecutor

        return RayExecutor()
    from deepedge.runtime.training.thread_launch import ThreadExecutor

    return ThreadExecutor()
