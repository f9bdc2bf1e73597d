"""An object hosted in a Ray actor with the training workers' options, called synchronously.

A benchmark measures its reference code (the plain training loop of
:mod:`deepedge.bench.plain_loop`) in the same kind of process as a
:class:`~deepedge.runtime.training.worker.TrainingWorker`: same actor options
(:func:`~deepedge.runtime.cluster.session.actor_options`: 0 CPUs, no restarts), priority and thread
count, and state kept across calls. :func:`hosted` gives it that process without the
benchmark importing Ray itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import ray

from deepedge.runtime.cluster.session import actor_options

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
Q = ParamSpec("Q")


class Hosted(Generic[T]):
    """A handle on the hosted ``T``: :meth:`call` runs one of its methods in the actor."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def call(self, method: Callable[Concatenate[T, Q], R], *args: Q.args, **kwargs: Q.kwargs) -> R:
        """``method(hosted, *args, **kwargs)`` in the actor; blocks for its result."""
        result: R = ray.get(getattr(self._handle, method.__name__).remote(*args, **kwargs))
        return result


@contextmanager
def hosted(cls: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Iterator[Hosted[T]]:
    """``cls(*args, **kwargs)`` built in a new actor; the actor is killed when the block ends."""
    remote: Any = ray.remote(cls)
    handle = remote.options(**actor_options()).remote(*args, **kwargs)
    try:
        yield Hosted(handle)
    finally:
        ray.kill(handle, no_restart=True)
