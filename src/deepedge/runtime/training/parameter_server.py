"""The centralised parameter server with asynchronous training loops (Deep-Edge, Sec. II).

The PS holds the model's **trainable** parameters (``requires_grad``) as one flat float32
vector ``w`` with a version number; frozen parameters never reach it (each worker has
them from the update's initial model), so they are neither pushed, pulled nor
checkpointed, and the traffic and the PS's memory scale with what trains. A worker
pushes the gradient ``g`` it computed on weights of version ``v_base``; the PS applies it
at once, without waiting for the other workers (asynchronous SGD with momentum)::

    u <- m u + g ;   w <- w - lr u ;   version <- version + 1

and replies with the new ``(version, w)`` (push + update + pull in one round trip). The
staleness of an update is ``version_before - v_base``.

Momentum compensated for asynchrony (:func:`asynchronous_sgd`): the update is configured
with the ``(lr, momentum)`` of the equivalent synchronous SGD, and the PS counts the
momentum the asynchrony itself adds. ``n`` asynchronous workers act on the expected update
like momentum ``mu_a = 1 - 1/n`` (Mitliagkas et al., "Asynchrony begets momentum", 2016:
with ``n`` gradients in flight, ``E[w+ - w] = (1 - 1/n) E[w - w-] - (lr/n) E[grad]``), so
the PS adds only the momentum that is missing, at the configured rate::

    mu_e = max(0, mu - (1 - 1/n)) ;   lr_e = lr

One worker runs ``(lr, mu)`` unchanged. The per-push rate is never raised above the
configured one: an earlier rule also rescaled it to keep the long-run step
``lr / (1 - mu)`` (``lr_e = lr (1 - mu_e) / (1 - mu)``, 0.425 for 0.05 and 0.9 on four
workers), and a stale gradient at that step threw a trained ResNet-18 off its minimum
(0.16-0.51 after four epochs of a fine-tune from 0.957, where synchronous SGD at the same
pair read 0.95-1.0 and the PS pushing at 0.04-0.05 read 0.98-0.99; docs/DESIGN.md).

With ``optimizer="adam"`` (a workload's ``training.optimizer``) the PS runs Adam instead,
each push one step (``u`` is the first moment, ``v`` the second)::

    u <- b1 u + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2 ;  t <- t + 1
    w <- w (1 - lr wd) - lr (u / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

(AdamW's decoupled weight decay ``wd``; SGD adds ``wd w`` to the gradient instead).

Alongside ``w`` the PS keeps an exponential moving average of the weights (Polyak
averaging), updated after every push with ``average_decay`` ``beta``::

    w_avg <- beta w_avg + (1 - beta) w

Asynchronous updates make ``w`` jitter from update to update; ``w_avg`` is what the
update scores and serves (:meth:`ParameterServer.pull_average`). ``beta = 0`` turns the
average off (``w_avg = w``).

Memory: :meth:`ParameterServer.stats` reports the PS process's resident set (psutil) and
its peak (``ru_maxrss``). The update is computed in place (torch views of the numpy vectors),
so a push allocates nothing of the model's size.

Buffers (BatchNorm's running statistics, any buffer of the model): with
``UpdateConfig.norm_statistics = ps-average`` each worker pushes its model's buffers and the
samples it trained on at the end of every epoch (:meth:`ParameterServer.push_buffers`);
the PS keeps the sample-weighted mean of the pushes of the newest epoch
(:func:`deepedge.learning.model_state.average_buffers`) and hands it to every worker at the
start of the next epoch and to the driver to score (:meth:`ParameterServer.pull_buffers`).
They are the model's state as much as ``w`` is, so they go into every checkpoint.

Checkpoints (:meth:`ParameterServer.checkpoint`, and automatically every
``checkpoint_every_updates`` updates) write ``w``, ``u``, ``w_avg``, the buffers, the version
and a JSON ``meta`` blob (epochs done, accuracy history) atomically to
``<dir>/ps-checkpoint.npz`` (write to a temporary file, then ``os.replace``), so a crash
never leaves a half-written checkpoint.

:class:`ParameterServer` is a plain class; the Ray executor runs it as a Ray actor
(``ray.remote(ParameterServer)``), the threads executor as an object of the update's
process whose methods the worker threads call (:mod:`deepedge.runtime.training.thread_launch`:
:meth:`ParameterServer.push_into`). Ray's workers push either through Ray actor calls
(:meth:`ParameterServer.push`) or, the update's default, through the gradient channel the
PS opens with :meth:`ParameterServer.open_channel`
(:mod:`deepedge.runtime.training.gradient_channel`:
a direct socket, served by threads of the PS process). Every method holds the PS's lock,
so Ray calls and channel pushes apply one at a time, in arrival order.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch

from deepedge.core.errors import InvalidInputError
from deepedge.learning.model_state import State, average_buffers
from deepedge.runtime.training.gradient_channel import ChannelAddress, GradientServer
from deepedge.runtime.training.monitor import InjectedCrash

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "ps-checkpoint.npz"
_BUFFER_KEY = "buffer:"  # prefix of a buffer's entry in the checkpoint archive


@dataclass(frozen=True)
class PSCheckpoint:
    weights: np.ndarray
    velocity: np.ndarray
    version: int
    meta: dict[str, Any]
    average: np.ndarray | None = None  # None: a checkpoint without an average (= weights)
    buffers: State = field(default_factory=dict)  # the model's buffers (empty: none kept)
    second: np.ndarray | None = None  # Adam's second moment (None: SGD)
    steps: int = 0  # Adam's step count


@dataclass(frozen=True)
class PSStats:
    version: int
    updates_by_worker: dict[str, int]
    max_staleness: int
    mean_staleness: float
    checkpoints_written: int
    size: int = 0  # values in the flat vector (the trainable parameters)
    rss_mb: float = 0.0  # resident set of the PS process now (psutil)
    peak_rss_mb: float = 0.0  # its peak resident set (ru_maxrss)
    pss_mb: float = 0.0  # proportional set now: shared pages split between their processes


def save_checkpoint(directory: Path, ckpt: PSCheckpoint) -> Path:
    """Atomically write ``ckpt`` to ``directory / CHECKPOINT_FILE``."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / CHECKPOINT_FILE
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    arrays: dict[str, Any] = {_BUFFER_KEY + k: v for k, v in ckpt.buffers.items()}
    if ckpt.second is not None:
        arrays.update(second=ckpt.second, steps=np.asarray(ckpt.steps))
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(
                fh,
                weights=ckpt.weights,
                velocity=ckpt.velocity,
                version=np.asarray(ckpt.version),
                meta=np.asarray(json.dumps(ckpt.meta)),
                average=ckpt.weights if ckpt.average is None else ckpt.average,
                **arrays,
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load_checkpoint(directory: Path) -> PSCheckpoint | None:
    """The checkpoint in ``directory``, or None when there is none."""
    path = Path(directory) / CHECKPOINT_FILE
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        return PSCheckpoint(
            weights=data["weights"].astype(np.float32),
            velocity=data["velocity"].astype(np.float32),
            version=int(data["version"]),
            meta=json.loads(str(data["meta"])),
            average=data["average"].astype(np.float32) if "average" in data else None,
            buffers={
                key[len(_BUFFER_KEY) :]: data[key]
                for key in data.files
                if key.startswith(_BUFFER_KEY)
            },
            second=data["second"].astype(np.float32) if "second" in data else None,
            steps=int(data["steps"]) if "steps" in data else 0,
        )


@dataclass
class ParameterServer:
    """Versioned weights + asynchronous momentum SGD (module docstring)."""

    weights: np.ndarray
    lr: float = 0.05
    momentum: float = 0.9
    checkpoint_dir: str | None = None
    checkpoint_every_updates: int = 0  # 0: only explicit checkpoints
    velocity: np.ndarray | None = None
    version: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    average_decay: float = 0.0  # beta of the weight average; 0: no averaging
    average: np.ndarray | None = None
    fail_after_updates: int | None = None  # fault injection: the PS crashes at this version
    # The PS has a process of its own (a Ray actor): an injected crash exits it; else (a
    # thread of the update's process) the PS raises InjectedCrash and stays crashed.
    own_process: bool = True
    crashed: bool = False
    buffers: State = field(default_factory=dict)  # the model's buffers, owned by the PS
    optimizer: str = "sgd"  # or "adam" (module docstring)
    weight_decay: float = 0.0
    second: np.ndarray | None = None  # Adam's second moment
    steps: int = 0  # Adam's step count
    lr_scale: float = 1.0  # the schedule's factor on lr for the epoch under way
    _buffer_epoch: int = 0  # the epoch whose pushes ``_buffer_pushes`` holds
    _buffer_pushes: dict[str, tuple[float, State]] = field(default_factory=dict)
    _updates: dict[str, int] = field(default_factory=dict)
    _staleness_sum: int = 0
    _staleness_max: int = 0
    _checkpoints: int = 0
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _channel: GradientServer | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.weights = np.asarray(self.weights, dtype=np.float32).copy()
        if self.weights.ndim != 1:
            raise InvalidInputError("weights must be a flat vector", field="weights")
        if not 0 < self.lr <= float(np.finfo(np.float32).max) or not 0 <= self.momentum < 1:
            raise InvalidInputError(
                "need 0 < lr (a float32) and 0 <= momentum < 1 (lower training.lr)", field="lr"
            )
        if not 0 <= self.average_decay < 1:
            raise InvalidInputError("need 0 <= average_decay < 1", field="average_decay")
        # Arrays that arrive through the object store are read-only: own writable copies.
        if self.velocity is None:
            self.velocity = np.zeros_like(self.weights)
        else:
            self.velocity = np.array(self.velocity, dtype=np.float32, copy=True)
        source = self.weights if self.average is None else self.average
        self.average = np.array(source, dtype=np.float32, copy=True)
        if self.average.shape != self.weights.shape:
            raise InvalidInputError("average and weights differ in shape", field="average")
        self.buffers = {k: np.array(v, copy=True) for k, v in self.buffers.items()}
        if self.optimizer not in {"sgd", "adam"} or self.weight_decay < 0:
            raise InvalidInputError(
                f"optimizer {self.optimizer!r} (sgd, adam), weight_decay >= 0", field="optimizer"
            )
        if self.optimizer == "adam":
            source = np.zeros_like(self.weights) if self.second is None else self.second
            self.second = np.array(source, dtype=np.float32, copy=True)

    @classmethod
    def from_checkpoint(
        cls,
        ckpt: PSCheckpoint,
        lr: float,
        momentum: float,
        checkpoint_dir: str | None,
        checkpoint_every_updates: int = 0,
        average_decay: float = 0.0,
        optimizer: str = "sgd",
        weight_decay: float = 0.0,
    ) -> ParameterServer:
        return cls(
            weights=ckpt.weights,
            lr=lr,
            momentum=momentum,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_updates=checkpoint_every_updates,
            velocity=ckpt.velocity,
            version=ckpt.version,
            meta=dict(ckpt.meta),
            average_decay=average_decay,
            average=ckpt.average,
            buffers=ckpt.buffers,
            optimizer=optimizer,
            weight_decay=weight_decay,
            second=ckpt.second,
            steps=ckpt.steps,
        )

    def push(
        self, worker_id: str, gradient: np.ndarray, base_version: int
    ) -> tuple[int, np.ndarray]:
        """Apply one worker's gradient now; return the new ``(version, weights)``."""
        with self._lock:
            self._apply(worker_id, gradient, base_version)
            return self.version, self.weights.copy()

    def push_into(
        self, worker_id: str, gradient: np.ndarray, base_version: int, out: np.ndarray
    ) -> int:
        """:meth:`push` with the new weights copied into ``out`` (which may be ``gradient``
        itself: it is read before ``out`` is written): the gradient channel's, and an
        in-process worker's, round trip without an allocation."""
        with self._lock:
            self._apply(worker_id, gradient, base_version)
            np.copyto(out, self.weights)
            return self.version

    def pull_into(self, out: np.ndarray) -> int:
        """:meth:`pull` with the weights copied into ``out`` (the channel's, an in-process
        worker's)."""
        with self._lock:
            np.copyto(out, self.weights)
            return self.version

    def open_channel(self, host: str | None = None) -> ChannelAddress:
        """Start (once) the gradient channel; where workers connect. ``host`` defaults to
        this node's address in the Ray cluster (loopback outside Ray)."""
        with self._lock:
            if self._channel is None:
                self._channel = GradientServer(
                    self.push_into, self.weights.size, host or _node_address(), self.pull_into
                )
            return self._channel.address

    def _apply(self, worker_id: str, gradient: np.ndarray, base_version: int) -> None:
        """``u <- m u + g; w <- w - lr u`` (and the average); the caller holds the lock."""
        if self.crashed:  # a crashed PS of the update's process applies nothing more
            raise InjectedCrash("the parameter server crashed")
        if gradient.shape != self.weights.shape:
            raise InvalidInputError(
                f"gradient shape {gradient.shape} != weights {self.weights.shape}",
                field="gradient",
            )
        assert self.velocity is not None and self.average is not None
        staleness = self.version - base_version
        # Fused in-place passes over torch views of the same memory (numpy would need a
        # temporary or two passes per line): 3 passes over the vector in all.
        g = torch.from_numpy(gradient if gradient.flags.writeable else gradient.copy())
        w, u = torch.from_numpy(self.weights), torch.from_numpy(self.velocity)
        if self.second is not None:
            self._adam(g, w, u, torch.from_numpy(self.second))
        else:
            u.mul_(self.momentum).add_(g)
            if self.weight_decay > 0:
                u.add_(w, alpha=self.weight_decay)
            w.add_(u, alpha=-self.lr * self.lr_scale)
        if self.average_decay > 0:
            avg = torch.from_numpy(self.average)
            avg.mul_(self.average_decay).add_(w, alpha=1.0 - self.average_decay)
        self.version += 1
        if self.fail_after_updates is not None and self.version >= self.fail_after_updates:
            log.warning("parameter server: injected crash at version %d", self.version)
            if self.own_process:
                os._exit(1)
            self.crashed = True
            raise InjectedCrash(f"the parameter server crashed at version {self.version}")
        self._updates[worker_id] = self._updates.get(worker_id, 0) + 1
        self._staleness_sum += staleness
        self._staleness_max = max(self._staleness_max, staleness)
        if (
            self.checkpoint_dir
            and self.checkpoint_every_updates > 0
            and self.version % self.checkpoint_every_updates == 0
        ):
            self.checkpoint()

    def _adam(self, g: torch.Tensor, w: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> None:
        """One Adam step (module docstring); the caller holds the lock."""
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        self.steps += 1
        u.mul_(beta1).add_(g, alpha=1.0 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        denom = (v / (1.0 - beta2**self.steps)).sqrt_().add_(eps)
        if self.weight_decay > 0:
            w.mul_(1.0 - self.lr * self.lr_scale * self.weight_decay)
        w.addcdiv_(u, denom, value=-self.lr * self.lr_scale / (1.0 - beta1**self.steps))

    def set_lr_scale(self, scale: float) -> None:
        """The learning-rate schedule's factor for the pushes from now on (the update's
        epoch loop sets it at each epoch's start: ``UpdateConfig.lr_schedule``)."""
        if not 0.0 <= scale <= 1.0:
            raise InvalidInputError(f"lr scale {scale} outside [0, 1]", field="lr_scale")
        with self._lock:
            self.lr_scale = float(scale)

    def pull(self) -> tuple[int, np.ndarray]:
        with self._lock:
            return self.version, self.weights.copy()

    def pull_average(self) -> tuple[int, np.ndarray]:
        """``(version, w_avg)``: the averaged weights (``w`` when averaging is off)."""
        with self._lock:
            if self.average_decay == 0:
                return self.version, self.weights.copy()
            assert self.average is not None
            return self.version, self.average.copy()

    def push_buffers(self, worker_id: str, epoch: int, samples: int, buffers: State) -> None:
        """A worker's buffers after its pass of ``epoch`` over ``samples`` samples; the PS's
        buffers become the weighted mean over the newest epoch's pushes (module docstring)."""
        with self._lock:
            if epoch < self._buffer_epoch:
                return  # a straggler of an older epoch
            if epoch > self._buffer_epoch:
                self._buffer_epoch, self._buffer_pushes = epoch, {}
            unknown = set(buffers) ^ set(self.buffers) if self.buffers else set()
            if unknown:
                raise InvalidInputError(
                    f"buffers {sorted(unknown)[:3]} differ from the model's", field="buffers"
                )
            self._buffer_pushes[worker_id] = (float(samples), buffers)
            self.buffers = average_buffers(self._buffer_pushes.values())

    def pull_buffers(self) -> State:
        """The buffers the PS owns (empty when the model has none or they are not shared)."""
        with self._lock:
            return {k: v.copy() for k, v in self.buffers.items()}

    def set_meta(self, meta: dict[str, Any]) -> None:
        """Replace the JSON meta stored with every later checkpoint."""
        with self._lock:
            self.meta = dict(meta)

    def checkpoint(self, meta: dict[str, Any] | None = None) -> str | None:
        """Write a checkpoint now (optionally updating ``meta`` first); returns its path."""
        with self._lock:
            if meta is not None:
                self.meta = dict(meta)
            if not self.checkpoint_dir:
                return None
            assert self.velocity is not None and self.average is not None
            # Written under the lock, so the live vectors go as they are (no copies).
            average = self.average if self.average_decay > 0 else None
            path = save_checkpoint(
                Path(self.checkpoint_dir),
                PSCheckpoint(
                    self.weights,
                    self.velocity,
                    self.version,
                    self.meta,
                    average,
                    self.buffers,
                    self.second,
                    self.steps,
                ),
            )
            self._checkpoints += 1
            return str(path)

    def retire(self) -> None:
        """Write no checkpoint any more: a stopped launch's PS that lives on in the
        update's process (a thread may still push once); the next launch owns the folder."""
        with self._lock:
            self.checkpoint_dir = None

    def stats(self) -> PSStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> PSStats:
        total = sum(self._updates.values())
        return PSStats(
            version=self.version,
            updates_by_worker=dict(self._updates),
            max_staleness=self._staleness_max,
            mean_staleness=self._staleness_sum / total if total else 0.0,
            checkpoints_written=self._checkpoints,
            size=int(self.weights.size),
            rss_mb=process_rss_mb(),
            peak_rss_mb=peak_rss_mb(),
            pss_mb=process_pss_mb(),
        )


def asynchronous_sgd(lr: float, momentum: float, workers: int) -> tuple[float, float]:
    """The PS's ``(lr_e, mu_e)`` for ``workers`` asynchronous workers, given the
    ``(lr, momentum)`` of the equivalent synchronous SGD (module docstring)::

        mu_e = max(0, momentum - (1 - 1/workers)) ;   lr_e = lr
    """
    if lr <= 0 or not 0 <= momentum < 1 or workers < 1:
        raise InvalidInputError("need lr > 0, 0 <= momentum < 1, workers >= 1", field="lr")
    implicit = 1.0 - 1.0 / workers
    return lr, max(0.0, momentum - implicit)


def process_rss_mb() -> float:
    """This process's resident set now, in MiB (psutil)."""
    return float(psutil.Process().memory_info().rss) / 2**20


def process_pss_mb() -> float:
    """This process's proportional set size now, in MiB (psutil; 0 where unsupported).

    Unlike the resident set, pages shared with other processes (the torch and Ray
    libraries every worker maps) count once in total across the processes, not once each."""
    try:
        return float(getattr(psutil.Process().memory_full_info(), "pss", 0.0)) / 2**20
    except (psutil.Error, OSError):
        return 0.0


def peak_rss_mb() -> float:
    """This process's peak resident set, in MiB: ``ru_maxrss`` (KiB on Linux), or the
    resident set now where the kernel's high-water mark has not caught up with it yet."""
    peak = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
    return max(peak, process_rss_mb())


def _node_address() -> str:
    """This process's node address in the Ray cluster, or loopback outside Ray."""
    import ray  # the runtime is the only layer that imports ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
