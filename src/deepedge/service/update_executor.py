"""Which executor runs a ``model-update`` job's training: the job document's choice.

A job document (:class:`deepedge.service.learner.ModelUpdateSpec`, and a deployment's
``update.executor`` that the control plane copies into it) says ``auto``, ``ray`` or
``threads``; the learner resolves it with :func:`resolve_executor` into the runtime's
:class:`~deepedge.runtime.training.update_config.UpdateExecutor` (docs/DESIGN.md, "An update pays
no Ray start on one machine"):

=========  ==================  ===========================================================
choice     live_cluster        runs on
=========  ==================  ===========================================================
auto       no                  threads: one machine, no Ray to start
auto       yes                 ray: the workers and the PS on their agents' nodes
ray        either              ray: an embedded Ray in the learner, or the cluster's
threads    no                  threads
threads    yes                 refused when the document is validated (a live cluster's
                               workers are processes on other nodes)
=========  ==================  ===========================================================

Pure, and light to import: the API validates documents with it.
"""

from __future__ import annotations

import enum

from deepedge.core.errors import InvalidInputError

LIVE_NEEDS_RAY = "executor threads cannot run a live_cluster update: use auto or ray"


class ExecutorChoice(enum.StrEnum):
    """Where a model-update's parameter server and workers run: ``threads`` of the job's
    learner (no Ray to start), ``ray`` actors, or ``auto`` (threads; Ray for a live
    cluster)."""

    AUTO = "auto"
    RAY = "ray"
    THREADS = "threads"


def resolve_executor(choice: ExecutorChoice, live_cluster: bool) -> str:
    """The executor that runs the job (the value of the runtime's ``UpdateExecutor``)."""
    if choice is ExecutorChoice.AUTO:
        return (ExecutorChoice.RAY if live_cluster else ExecutorChoice.THREADS).value
    if choice is ExecutorChoice.THREADS and live_cluster:
        raise InvalidInputError(LIVE_NEEDS_RAY, field="executor")
    return choice.value
