"""A training worker: one asynchronous training loop against the parameter server.

Each selected worker ``w_i`` receives its shard ``d_i`` from the data store (through the
Ray object store) and trains with its batch size ``b_i``, both taken from the plan. One
step (Deep-Edge, Sec. II/III): forward + backward on a batch with the newest weights the
worker holds, push the gradient, receive the new weights (push + update + pull in one
round trip), then pace the step to the emulated device (:mod:`deepedge.runtime.training.emulation`).

The round trip goes through the worker's link to the PS (:mod:`deepedge.runtime.training.ps_link`):
for an actor, the PS's gradient channel when the update passes its address to
:meth:`TrainingWorker.run_epoch` (a direct socket between the two actor processes,
:mod:`deepedge.runtime.training.gradient_channel`; the connection is kept across epochs), else a
Ray call to ``ps.push``; for a thread, a call of the PS object of the same process. Every
way the PS applies the same update.

``push_window`` sets how the round trip meets the compute:

* ``0``: the step waits for its own reply (every gradient is computed on the weights the
  PS returned for the previous push of this worker).
* ``k >= 1``: a background communication thread of the worker pushes the gradients in
  order and keeps the newest reply; the training loop starts the next batch at once on
  the newest weights it holds and blocks only when ``k`` of its pushes are still
  unanswered. The worker's own contribution to a gradient's staleness is thus at most
  ``k`` updates (bounded staleness); the PS round trip hides behind the next batch's
  forward and backward pass. The reply's weights are loaded before the next batch.

Pipelining trades freshness for throughput, and only pays when the round trip is a
sizeable part of a step. Staleness is what it costs: with ``n`` workers each gradient
meets about ``n (k + 1) - 1`` other updates on average (4 workers: 1.8-2 with ``k = 0``,
4.2 with ``k = 1``, measured on the ResNet head), and the step size at which asynchronous
SGD stays stable shrinks with the staleness (a gradient delayed by ``tau`` updates
destabilises a curvature ``lambda`` once ``lr lambda`` exceeds about ``1 / (1 + 2 tau)``).
Hence the **fresh-wait rule**: after a push the loop waits for its reply before the next
batch when the measured round trip is at most ``fresh_wait_frac`` of the measured compute
of a batch (moving averages over the epoch's steps)::

    wait  <=>  rtt_avg <= fresh_wait_frac x compute_avg

Waiting then costs at most that fraction of throughput and takes the worker's own
in-flight push out of the staleness (window 0 behaviour); a long round trip (a large
model's gradient on the wire) is still hidden behind the next batch. ``fresh_wait_frac
= 0`` pipelines always (the plain window ``k``); the update uses 0.02
(:class:`~deepedge.runtime.training.update_config.UpdateConfig`). The ResNet's frozen-backbone head
(16 KB on the wire: 0.2 ms of a 126 ms batch) waits; the digits CNN (0.24 ms of a 3-4 ms
batch of 128, more of a smaller batch) and the whole ResNet (45 MB each way) pipeline.

Only the trainable parameters (``requires_grad``) travel: the worker loads the update's
initial model once (``initial_weights``, the full flat vector, through the object store),
which fixes its frozen parameters for good; every gradient and every weights reply is the
flat vector of the trainable ones. The gradient is written by one ``torch.cat`` into a
preallocated float32 buffer (``push_window + 1`` of them, used in turn, so that a buffer
is never rewritten while its push is in flight) and sent as it is (optionally compressed
to float16 on the way up, :class:`~deepedge.runtime.training.gradient_channel.GradientEncoding`).
Over the channel the reply's weights are received into that same buffer (the gradient
is spent once sent) and loaded into the parameters with one copy: the buffer of push
``k`` is next written by step ``k + window + 1``, which starts only after the reply of
push ``k`` (or a newer one) has been taken, so no reply buffers of their own are needed
(two vectors of the model's size fewer per worker with window 1).

Buffers (BatchNorm's running statistics) are the worker's own: the initial model's come
with its initial weights (``initial_buffers``), and a training-mode forward pass updates
them from the worker's shard. With ``share_buffers`` (``norm_statistics = ps-average``) the
worker pushes them to the PS at the end of each epoch and starts the next epoch from the
PS's average (:meth:`~deepedge.runtime.training.parameter_server.ParameterServer.push_buffers`).

The gradient is clipped to ``clip_grad_norm`` on its global L2 norm (computed on the flat
vector, the same rule as ``torch.nn.utils.clip_grad_norm_``): clipping bounds what one
stale gradient can do to the shared weights.

:class:`TrainingWorker` is a plain class: the Ray executor runs it as an actor
(:meth:`TrainingWorker.run_epoch` against the PS actor), the threads executor as an object
whose :meth:`TrainingWorker.train_epoch` a thread of the update's process runs against the
PS object of that process (:class:`~deepedge.runtime.training.ps_link.DirectLink`); the loop is the
same. ``fail_after_steps`` injects a crash for fault-tolerance tests and benchmarks: the
actor's process exits (``os._exit``), a thread raises
:class:`~deepedge.runtime.training.monitor.InjectedCrash`.
"""

from __future__ import annotations

import enum
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import torch
from torch import nn

from deepedge.core.errors import InvalidInputError
from deepedge.learning.model_state import State, buffer_arrays, load_buffers
from deepedge.learning.models import set_flat_weights, trainable_parameters
from deepedge.runtime.training.emulation import EmulatedDevice, Pacer
from deepedge.runtime.training.gradient_channel import ChannelAddress, GradientEncoding
from deepedge.runtime.training.monitor import InjectedCrash
from deepedge.runtime.training.parameter_server import peak_rss_mb, process_pss_mb, process_rss_mb
from deepedge.runtime.training.ps_link import PSLink, RayLink

log = logging.getLogger(__name__)


class LossKind(enum.Enum):
    CLASSIFICATION = "cross-entropy"
    REGRESSION = "mse"


@dataclass(frozen=True)
class WorkerEpochStats:
    worker_id: str
    epoch: int
    samples: int  # samples processed this epoch (= d_i)
    steps: int
    batch_size: int  # b_i actually used
    wall_s: float  # the epoch's wall-clock time on this worker
    compute_s: float  # forward + backward + clipping (real torch)
    ps_round_trip_s: float  # time the training loop spent on the PS (waiting, loading weights)
    slept_s: float  # pacing to the emulated device
    overruns: int  # steps where the host was slower than the emulated device
    mean_loss: float
    rss_mb: float = 0.0  # resident set of the worker process at the epoch's end (psutil)
    peak_rss_mb: float = 0.0  # its peak resident set so far (ru_maxrss)
    pss_mb: float = 0.0  # its proportional set at the epoch's end (shared pages split)
    fresh_waits: int = 0  # steps that waited for their own push's reply (fresh-wait rule)


PushFn = Callable[[np.ndarray, int], tuple[int, np.ndarray]]


class _PushThread:
    """The background communication thread of one epoch (``push_window >= 1``).

    :meth:`submit` hands a gradient to the thread and blocks while ``window`` pushes are
    unanswered; the thread pushes in submission order and keeps the newest reply, which
    :meth:`take_newest` hands out once; :meth:`wait_idle` waits for every unanswered push.
    ``rtt_avg_s`` is a moving average of the push round trips (None before the first),
    carried over from the worker's earlier epochs.
    An exception of the thread (the PS died) is re-raised in the training loop at its next
    :meth:`submit`, :meth:`wait_idle` or :meth:`close`.
    """

    _STOP = object()

    def __init__(
        self, push: PushFn, worker_id: str, window: int, rtt_avg_s: float | None = None
    ) -> None:
        self._push = push
        self._window = window
        self._pending = 0
        self._newest: tuple[int, np.ndarray] | None = None
        self.rtt_avg_s = rtt_avg_s
        self._error: BaseException | None = None
        self._cond = threading.Condition()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"push-{worker_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            assert isinstance(item, tuple)
            gradient, base_version = item
            started = time.perf_counter()
            try:
                reply = self._push(gradient, base_version)
            except BaseException as exc:  # handed to the training loop, which re-raises it
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            rtt_s = time.perf_counter() - started
            with self._cond:
                self.rtt_avg_s = _moving_average(self.rtt_avg_s, rtt_s)
                self._newest = (int(reply[0]), reply[1])
                self._pending -= 1
                self._cond.notify_all()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, gradient: np.ndarray, base_version: int) -> None:
        with self._cond:
            while self._pending >= self._window and self._error is None:
                self._cond.wait()
            self._raise_if_failed()
            self._pending += 1
        self._queue.put((gradient, base_version))

    def wait_idle(self) -> None:
        """Block until every submitted push has been answered."""
        with self._cond:
            while self._pending > 0 and self._error is None:
                self._cond.wait()
            self._raise_if_failed()

    def take_newest(self) -> tuple[int, np.ndarray] | None:
        with self._cond:
            newest, self._newest = self._newest, None
            return newest

    def close(self) -> tuple[int, np.ndarray] | None:
        """Wait for every push to be answered, stop the thread; the newest unread reply."""
        try:
            self.wait_idle()
        except BaseException:
            self._queue.put(self._STOP)
            self._thread.join()
            raise
        self._queue.put(self._STOP)
        self._thread.join()
        self._raise_if_failed()
        return self.take_newest()


def _moving_average(average: float | None, sample: float, weight: float = 0.2) -> float:
    """Exponential moving average; the first sample starts it."""
    return sample if average is None else (1.0 - weight) * average + weight * sample


def fresh_wait(rtt_avg_s: float | None, compute_avg_s: float | None, frac: float) -> bool:
    """The fresh-wait rule (module docstring): wait for the reply when the round trip is
    at most ``frac`` of a batch's compute; never before both have been measured."""
    if rtt_avg_s is None or compute_avg_s is None or frac <= 0:
        return False
    return rtt_avg_s <= frac * compute_avg_s


class TrainingWorker:
    """One worker actor (module docstring)."""

    def __init__(
        self,
        worker_id: str,
        model_factory: Callable[[], nn.Module],
        batch_size: int,
        device: EmulatedDevice | None = None,
        loss: LossKind = LossKind.CLASSIFICATION,
        seed: int = 0,
        fail_after_steps: int | None = None,
        torch_threads: int = 1,
        clip_grad_norm: float = 2.0,
        push_window: int = 0,
        initial_weights: np.ndarray | None = None,
        gradient_encoding: GradientEncoding = GradientEncoding.FLOAT32,
        fresh_wait_frac: float = 0.0,
        initial_buffers: State | None = None,
        share_buffers: bool = False,
        own_process: bool = True,
    ) -> None:
        if batch_size < 1:
            raise InvalidInputError("batch_size must be >= 1", field="batch_size")
        if push_window < 0:
            raise InvalidInputError("push_window must be >= 0", field="push_window")
        torch.set_num_threads(torch_threads)
        self.worker_id = worker_id
        self.model = model_factory()
        if initial_weights is not None:  # frozen parameters are fixed here, once
            set_flat_weights(self.model, initial_weights)
        if initial_buffers:
            load_buffers(self.model, initial_buffers)
        self.share_buffers = share_buffers and bool(buffer_arrays(self.model))
        self.params = trainable_parameters(self.model)
        self.size = sum(p.numel() for p in self.params)
        if self.size == 0:
            raise InvalidInputError("the model has no trainable parameter", field="model")
        self._grads = [np.empty(self.size, np.float32) for _ in range(push_window + 1)]
        self._grad_turn = 0
        self.gradient_encoding = gradient_encoding
        self.batch_size = batch_size
        self.device = device
        self.loss = loss
        self.rng = np.random.default_rng(seed)
        self.fail_after_steps = fail_after_steps
        self.steps_done = 0
        self.clip_grad_norm = clip_grad_norm
        self.push_window = push_window
        self.fresh_wait_frac = fresh_wait_frac
        # moving averages of the fresh-wait rule, kept across epochs
        self._rtt_avg_s: float | None = None
        self._compute_avg_s: float | None = None
        self.own_process = own_process
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self._ray_link: RayLink | None = None

    def load_shard(self, shard: tuple[np.ndarray, np.ndarray]) -> int:
        """Receive ``(inputs, targets)`` of this worker's shard; returns ``d_i``."""
        inputs, targets = shard
        if len(inputs) != len(targets):
            raise InvalidInputError("shard inputs and targets differ in length", field="shard")
        self.x = torch.as_tensor(inputs, dtype=torch.float32)
        dtype = torch.long if self.loss is LossKind.CLASSIFICATION else torch.float32
        self.y = torch.as_tensor(targets, dtype=dtype)
        return len(inputs)

    def ping(self) -> str:
        return self.worker_id

    def _loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.loss is LossKind.CLASSIFICATION:
            return nn.functional.cross_entropy(out, y)
        return nn.functional.mse_loss(out.reshape(y.shape), y)

    def _gradient(self, idx: torch.Tensor) -> tuple[np.ndarray, float]:
        """Forward + backward on the batch ``idx``; the clipped flat gradient and the loss."""
        assert self.x is not None and self.y is not None
        for p in self.params:
            p.grad = None
        loss = self._loss(self.model(self.x[idx]), self.y[idx])
        loss.backward()
        buffer = self._grads[self._grad_turn]
        self._grad_turn = (self._grad_turn + 1) % len(self._grads)
        flat = torch.from_numpy(buffer)
        torch.cat(
            [
                p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel())
                for p in self.params
            ],
            out=flat,
        )
        norm = float(torch.linalg.vector_norm(flat))
        if norm > self.clip_grad_norm:
            flat.mul_(self.clip_grad_norm / (norm + 1e-6))
        # A buffer of the ring: rewritten only once its push has been answered.
        return buffer, float(loss.detach())

    def _load(self, weights: np.ndarray) -> None:
        """Copy the flat trainable ``weights`` into the parameters (one copy, no aliasing)."""
        if weights.shape != (self.size,):
            raise InvalidInputError(
                f"expected {self.size} trainable weights, got shape {weights.shape}",
                field="weights",
            )
        source = torch.from_numpy(weights if weights.flags.writeable else weights.copy())
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                p.view(-1).copy_(source[offset : offset + n])
                offset += n

    def run_epoch(
        self, ps: Any, epoch: int, channel: ChannelAddress | None = None
    ) -> WorkerEpochStats:
        """:meth:`train_epoch` against the PS actor ``ps`` (the Ray executor), through its
        gradient channel at ``channel`` when given, else Ray calls."""
        if self._ray_link is None:
            self._ray_link = RayLink(self.worker_id, self.size, self.gradient_encoding)
        return self.train_epoch(self._ray_link.bind(ps, channel), epoch)

    def train_epoch(self, link: PSLink, epoch: int) -> WorkerEpochStats:
        """Process the whole shard once, pushing every batch's gradient through ``link``."""
        if self.x is None or self.y is None:
            raise InvalidInputError("run_epoch before load_shard", field="shard")
        started = time.perf_counter()
        push = link.push
        # into a free gradient buffer: no push is in flight
        version, weights = link.pull(self._grads[self._grad_turn])
        self._load(weights)
        if self.share_buffers and (shared := link.pull_buffers()):
            load_buffers(self.model, shared)
        pacer = Pacer(self.device) if self.device is not None else None
        order = torch.as_tensor(self.rng.permutation(len(self.y)))
        pusher = (
            _PushThread(push, self.worker_id, self.push_window, self._rtt_avg_s)
            if self.push_window
            else None
        )
        compute_s = ps_s = loss_sum = 0.0
        steps = waits = 0
        self.model.train()
        try:
            for start in range(0, len(order), self.batch_size):
                step_started = time.perf_counter()
                if pusher is not None and (newest := pusher.take_newest()) is not None:
                    version, weights = newest
                    self._load(weights)
                t_compute = time.perf_counter()
                grad, loss = self._gradient(order[start : start + self.batch_size])
                t_push = time.perf_counter()
                compute_s += t_push - t_compute
                self._compute_avg_s = _moving_average(self._compute_avg_s, t_push - t_compute)
                if pusher is None:
                    version, weights = push(grad, version)
                    self._load(weights)
                else:
                    pusher.submit(grad, version)
                    if fresh_wait(pusher.rtt_avg_s, self._compute_avg_s, self.fresh_wait_frac):
                        pusher.wait_idle()  # the next batch starts from this push's reply
                        waits += 1
                ps_s += (t_compute - step_started) + (time.perf_counter() - t_push)
                loss_sum += loss
                steps += 1
                self.steps_done += 1
                if self.fail_after_steps is not None and self.steps_done >= self.fail_after_steps:
                    self._crash()
                if pacer is not None:
                    pacer.pace(step_started)
        finally:
            if pusher is not None:
                t_close = time.perf_counter()
                pusher.close()
                self._rtt_avg_s = pusher.rtt_avg_s
                ps_s += time.perf_counter() - t_close
        if self.share_buffers:
            link.push_buffers(epoch, len(order), buffer_arrays(self.model))
        return WorkerEpochStats(
            worker_id=self.worker_id,
            epoch=epoch,
            samples=len(order),
            steps=steps,
            batch_size=self.batch_size,
            wall_s=time.perf_counter() - started,
            compute_s=compute_s,
            ps_round_trip_s=ps_s,
            slept_s=pacer.slept_s if pacer else 0.0,
            overruns=pacer.overruns if pacer else 0,
            mean_loss=loss_sum / max(1, steps),
            # a worker thread shares its process: the PS's figures are the process's
            rss_mb=process_rss_mb() if self.own_process else 0.0,
            peak_rss_mb=peak_rss_mb() if self.own_process else 0.0,
            pss_mb=process_pss_mb() if self.own_process else 0.0,
            fresh_waits=waits,
        )

    def _crash(self) -> NoReturn:
        """The injected crash: the process exits, or, for a worker that shares the update's
        process (a thread), :class:`InjectedCrash` ends its epoch."""
        log.warning("%s: injected crash after %d steps", self.worker_id, self.steps_done)
        if self.own_process:
            os._exit(1)
        raise InjectedCrash(f"{self.worker_id} crashed after {self.steps_done} steps")
