"""How a training worker reaches its parameter server: one interface, two routes.

A :class:`~deepedge.runtime.training.worker.TrainingWorker` trains an epoch against a
:class:`PSLink`: ``push`` (a gradient up, the new weights back: one round trip), ``pull``
(the weights, at an epoch's start) and, for a model whose running statistics the PS
averages, ``push_buffers`` / ``pull_buffers``. The worker's loop is the same whichever
route its link takes:

* :class:`RayLink` (the Ray executor): the PS is a Ray actor in another process, maybe on
  another node; pushes and pulls go over its gradient channel (a direct socket,
  :mod:`deepedge.runtime.training.gradient_channel`) or as Ray actor calls, buffers as Ray calls.
* :class:`DirectLink` (the threads executor): the PS is an object of the worker's own
  process; a push is a call of
  :meth:`~deepedge.runtime.training.parameter_server.ParameterServer.push_into`
  under the PS's lock, the new weights written into the gradient's own buffer (no
  allocation, no copy through a socket). A link whose PS crashed, or whose launch was
  stopped, raises :class:`LinkClosed` at the next call, which ends the worker's epoch as a
  closed channel ends a Ray worker's.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import numpy as np

from deepedge.learning.model_state import State
from deepedge.runtime.training.gradient_channel import (
    ChannelAddress,
    GradientClient,
    GradientEncoding,
)
from deepedge.runtime.training.parameter_server import ParameterServer


class PSLink(Protocol):
    """A worker's route to its parameter server (module docstring)."""

    def push(self, gradient: np.ndarray, base_version: int) -> tuple[int, np.ndarray]:
        """Apply ``gradient`` (computed on weights of ``base_version``); the new version
        and weights (possibly written into ``gradient``'s own buffer: it is spent)."""
        ...

    def pull(self, into: np.ndarray) -> tuple[int, np.ndarray]:
        """The current version and weights (possibly written into ``into``)."""
        ...

    def pull_buffers(self) -> State:
        """The buffers the PS averages (empty: none)."""
        ...

    def push_buffers(self, epoch: int, samples: int, buffers: State) -> None:
        """This worker's buffers after its pass of ``epoch`` over ``samples`` samples."""
        ...


class LinkClosed(Exception):
    """The PS behind a :class:`DirectLink` crashed, or the launch was stopped."""


class RayLink:
    """The route to a PS actor (module docstring); one per worker, kept across epochs so
    that its gradient channel's connection is opened once. :meth:`bind` points it at the
    PS (and its channel, None: Ray calls) before each epoch."""

    def __init__(self, worker_id: str, size: int, encoding: GradientEncoding) -> None:
        self.worker_id, self.size, self.encoding = worker_id, size, encoding
        self.ps: Any = None
        self._client: GradientClient | None = None

    def bind(self, ps: Any, channel: ChannelAddress | None) -> RayLink:
        self.ps = ps
        if channel is None:
            self.close()
        elif self._client is None or self._client.address != channel:
            self.close()
            # Replies land in the gradient buffer just sent (the worker's module
            # docstring): no buffers of the client's own.
            self._client = GradientClient(
                channel, self.worker_id, self.size, self.encoding, reply_buffers=0
            )
        return self

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def push(self, gradient: np.ndarray, base_version: int) -> tuple[int, np.ndarray]:
        if self._client is not None:
            return self._client.push(gradient, base_version, reply_into=gradient)
        import ray  # the runtime is the only layer that imports ray

        version, weights = ray.get(self.ps.push.remote(self.worker_id, gradient, base_version))
        return int(version), weights

    def pull(self, into: np.ndarray) -> tuple[int, np.ndarray]:
        if self._client is not None:
            # over the channel, into a free buffer: no copy of the weights through Ray's
            # object store each epoch
            return self._client.pull(reply_into=into)
        import ray

        version, weights = ray.get(self.ps.pull.remote())
        return int(version), weights

    def pull_buffers(self) -> State:
        import ray

        buffers: State = ray.get(self.ps.pull_buffers.remote())
        return buffers

    def push_buffers(self, epoch: int, samples: int, buffers: State) -> None:
        import ray

        ray.get(self.ps.push_buffers.remote(self.worker_id, epoch, samples, buffers))


class DirectLink:
    """The route to a PS of the same process (module docstring); ``stopped`` is the
    launch's: once set, every call raises :class:`LinkClosed`."""

    def __init__(
        self, ps: ParameterServer, worker_id: str, stopped: threading.Event | None = None
    ) -> None:
        self.ps, self.worker_id = ps, worker_id
        self.stopped = stopped if stopped is not None else threading.Event()

    def _check(self) -> None:
        if self.stopped.is_set():
            raise LinkClosed("the launch was stopped")
        if self.ps.crashed:
            raise LinkClosed("the parameter server crashed")

    def push(self, gradient: np.ndarray, base_version: int) -> tuple[int, np.ndarray]:
        self._check()
        version = self.ps.push_into(self.worker_id, gradient, base_version, gradient)
        return version, gradient

    def pull(self, into: np.ndarray) -> tuple[int, np.ndarray]:
        self._check()
        return self.ps.pull_into(into), into

    def pull_buffers(self) -> State:
        self._check()
        return self.ps.pull_buffers()

    def push_buffers(self, epoch: int, samples: int, buffers: State) -> None:
        self._check()
        self.ps.push_buffers(self.worker_id, epoch, samples, buffers)
