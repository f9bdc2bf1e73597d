"""SIFT background app, loopback parameter server, peers and the DL update task, for real."""

from __future__ import annotations

import time

import numpy as np
import psutil
import pytest
import torch
from torch import nn

from _support import wait_until
from deepedge.core.errors import InvalidInputError
from deepedge.profiling.loopback_ps import LoopbackParameterServer, PeerWorkers, PsClient
from deepedge.profiling.sift_app import FrameRecord, FrameStats, SiftApp, sift_frame
from deepedge.profiling.update_task import UpdateTask, flat_weights


def test_sift_frame_is_a_real_photo_at_the_testbed_size():
    frame = sift_frame()
    assert frame.shape == (320, 640) and frame.dtype == np.uint8
    assert frame.std() > 20  # a photograph, not a flat image


@pytest.mark.parametrize(
    ("exec_s", "deadline_s", "miss_frac"),
    [([0.1, 0.1, 0.1], 0.2, 0.0), ([0.1, 0.3], 0.2, 0.5), ([0.5], 0.2, 1.0)],
)
def test_frame_stats(exec_s, deadline_s, miss_frac):
    frames = [FrameRecord(float(k), e, 10, e > deadline_s) for k, e in enumerate(exec_s)]
    stats = FrameStats.of(frames)
    assert stats.miss_frac == miss_frac
    assert stats.median_s == pytest.approx(float(np.median(exec_s)))


def test_sift_app_records_frames_and_stops():
    with SiftApp(period_s=0.1) as app:
        start = time.monotonic()
        time.sleep(1.0)
        frames = app.frames(start, time.monotonic())
        pid = app.pid
    assert frames, "no frame in one second"
    assert all(f.exec_s > 0 and f.n_keypoints > 50 for f in frames)
    assert pid is not None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_parameter_server_applies_sgd():
    w0 = np.arange(6, dtype=np.float32)
    with LoopbackParameterServer(w0, lr=0.5) as server:
        client = server.client()
        grad = np.ones(6, dtype=np.float32)
        first = client.push_pull(grad)
        second = client.push_pull(grad)
        client.close()
    np.testing.assert_allclose(first.weights, w0 - 0.5)
    np.testing.assert_allclose(second.weights, w0 - 1.0)
    assert first.round_trip_s > 0 and first.server_update_s >= 0


def _pushes_after(client: PsClient, more_than: int) -> int:
    """Wait until the server has served more than ``more_than`` pushes; the count then."""
    wait_until(lambda: client.pushes_served() > more_than, timeout_s=60.0)
    return client.pushes_served()


def _settled(client: PsClient, quiet_s: float = 1.0, timeout_s: float = 60.0) -> int:
    """Poll until the push count stays the same for ``quiet_s``; that count."""
    deadline = time.monotonic() + timeout_s
    last = client.pushes_served()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = client.pushes_served()
        if now == last:
            return now
        last = now
    return last


def test_peers_push_while_running_and_stop_when_paused():
    w0 = np.zeros(1000, dtype=np.float32)
    with LoopbackParameterServer(w0) as server, PeerWorkers(server, 2) as peers:
        client = server.client()
        assert client.pushes_served() == 0  # idle peers do not push
        peers.run([0.005, 0.005])
        assert _pushes_after(client, 10) > 10
        peers.run([])
        paused = _settled(client)
        time.sleep(0.5)
        assert client.pushes_served() == paused  # paused peers stay silent
        peers.run([0.005])
        assert _pushes_after(client, paused) > paused  # and resume on request
        with pytest.raises(InvalidInputError):
            peers.run([0.01, 0.01, 0.01])
        client.close()


def test_commands_arriving_together_are_all_obeyed():
    """Before: a peer read its commands with a buffered readline, so a "run" and a "pause"
    that reached it together (a peer still starting up) left the pause unseen, and the
    peer pushed for ever."""
    w0 = np.zeros(100, dtype=np.float32)
    with LoopbackParameterServer(w0) as server, PeerWorkers(server, 2) as peers:
        client = server.client()
        peers.run([0.005, 0.005])
        peers.run([])  # right behind it: the peers are most likely still importing
        paused = _settled(client)
        time.sleep(0.5)
        assert client.pushes_served() == paused
        client.close()


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_update_task_trains_through_the_server():
    rng = np.random.default_rng(0)
    images = rng.random((64, 1, 4, 4), dtype=np.float32)
    labels = (images.reshape(64, -1).sum(1) > 8).astype(np.int64)
    model = _Tiny()
    w0 = flat_weights(model)
    with LoopbackParameterServer(w0, lr=0.1) as server:
        client = server.client()
        task = UpdateTask(model, images, labels, client, seed=0)
        window = task.run_window(batch_size=16, duration_s=0.2)
        client.close()
    # min_steps=3 guarantees three steps whatever the machine's speed; the first is warm-up
    assert window.n_steps >= 2 and window.batch_size == 16
    assert window.t_compute_s > 0 and window.t_update_s > window.t_update_server_s >= 0
    assert not np.allclose(flat_weights(model), w0)  # the pulled weights were applied


def test_update_task_rejects_bad_input():
    with LoopbackParameterServer(np.zeros(4, dtype=np.float32)) as server:
        client = server.client()
        with pytest.raises(InvalidInputError):
            UpdateTask(_Tiny(), np.zeros((3, 16)), np.zeros(3), client)
        client.close()
