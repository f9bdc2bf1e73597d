"""Ekya edge-server actors: hot checkpoint loading without dropped requests, window run on Ray."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from deepedge.learning.models import make_edge_model
from deepedge.learning.stream import load_digits_images
from deepedge.planning.window.documents import (
    InferenceConfig,
    RetrainingConfig,
    RetrainingHyperparameters,
    StreamWindow,
)
from deepedge.planning.window.thief import ThiefScheduler
from deepedge.runtime.edge.edge_server import (
    EdgeServer,
    InferenceJob,
    StreamRuntime,
    edge_cnn_factory,
    state_of,
)


def _constant_state(label: int) -> dict[str, np.ndarray]:
    model = make_edge_model(10, 16)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.head.bias[label] = 5.0
    return state_of(model)


def test_hot_load_answers_every_queued_request() -> None:
    job = InferenceJob(_constant_state(1), edge_cnn_factory())
    job.configure(0.5, 1.0)
    frames = np.random.default_rng(0).random((8, 1, 16, 16)).astype(np.float32)
    replies: list[tuple[int, set[int]]] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(25):
            r = job.infer(frames)
            with lock:
                replies.append((r.model_version, set(r.labels.tolist())))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    versions = [job.load_checkpoint(_constant_state(2 + i % 2)) for i in range(6)]
    for t in threads:
        t.join()
    assert len(replies) == 75  # nothing dropped
    assert versions == list(range(1, 7))
    for version, labels in replies:  # a reply comes wholly from one model version
        assert labels == ({1} if version == 0 else {2 + (version - 1) % 2})


def test_frame_sampling_carries_labels_over() -> None:
    job = InferenceJob(_constant_state(4), edge_cnn_factory())
    job.configure(0.1, 0.25)
    reply = job.infer(np.zeros((10, 1, 16, 16), np.float32))
    assert reply.analysed == 3
    assert reply.labels.tolist() == [4] * 10


def test_the_share_is_applied_on_the_thread_that_infers() -> None:
    """An actor runs its calls on a pool of threads and OpenMP's threads are each thread's
    own: a share set by ``configure`` on one thread must still size the next inference on
    another."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    cores = os.cpu_count() or 1
    job = InferenceJob(_constant_state(4), edge_cnn_factory())
    frames = np.zeros((4, 1, 16, 16), np.float32)
    other = ThreadPoolExecutor(1)
    other.submit(job.infer, frames).result()  # that thread's torch is initialised
    for share, threads in ((2 / cores, 2), (1 / cores, 1), (3 / cores, 3)):
        assert job.configure(share, 1.0) == threads  # on this thread
        assert other.submit(job.infer, frames).result().threads == threads
        assert other.submit(torch.get_num_threads).result() == threads
    other.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_window_on_ray_retrains_hot_loads_and_replans() -> None:
    from deepedge.runtime.cluster.session import ray_session

    digits = load_digits_images(16)
    inference = [
        InferenceConfig(name="full", accuracy_factor=1.0, gpu_demand=0.5),
        InferenceConfig(name="half", accuracy_factor=0.8, gpu_demand=0.25),
    ]
    hp = RetrainingHyperparameters(
        epochs=2, batch_size=32, last_layer_neurons=10, frozen_layers=0, data_fraction=1.0
    )
    server = EdgeServer(ThiefScheduler(), gpus=2.0, window_s=1000.0)
    with ray_session(num_cpus=2):
        for v, acc in enumerate((0.3, 0.9)):
            idx = np.arange(v * 200, v * 200 + 200)
            server.add_stream(
                StreamRuntime(
                    stream=StreamWindow(
                        stream_id=f"s{v}",
                        current_accuracy=acc,
                        inference_configs=inference,
                        retraining_configs=[
                            RetrainingConfig(
                                name="quick",
                                accuracy_after=0.95 if v == 0 else 0.9,
                                gpu_seconds=20.0,
                                hyperparameters=hp,
                            )
                        ],
                    ),
                    state=state_of(make_edge_model(10, 16, seed=v)),
                    train=(digits.images[idx[:150]], digits.labels[idx[:150]]),
                    val=(digits.images[idx[150:]], digits.labels[idx[150:]]),
                    sample_fractions={"full": 1.0, "half": 0.5},
                )
            )
        actor = server.streams["s0"].actor
        frames = digits.images[:16]
        before = [actor.infer.remote(frames) for _ in range(5)]
        outcomes = server.run_window()
        after = [actor.infer.remote(frames) for _ in range(5)]
        import ray

        replies = ray.get(before + after)
    # s0 gains the most from retraining: the thief retrains it; s1 gains nothing.
    assert "s0" in outcomes and "s1" not in outcomes
    assert len(replies) == 10
    assert replies[-1].model_version == 1
    assert len(server.plans) >= 2  # window start + re-plan on completion
    assert server.plans[-1].decision("s0").retraining_config is None


class _Actor:
    """An inference actor's ``load_checkpoint`` as a recorder (no Ray)."""

    def __init__(self) -> None:
        self.loaded: list[dict[str, np.ndarray]] = []
        self.load_checkpoint = self

    def remote(self, state: dict[str, np.ndarray]) -> int:
        self.loaded.append(state)
        return len(self.loaded)


@pytest.mark.parametrize(
    ("deployed", "retrained", "min_gain", "hot_loaded"),
    [
        (0.975, 0.90, 0.0, False),  # the bring-your-own report's window 5: never hot-loaded
        (0.438, 0.208, 0.0, False),
        (0.60, 0.80, 0.0, True),
        (0.60, 0.61, 0.05, False),  # the deployment's gate asks for a gain
        (0.60, 0.60, 0.0, True),  # a tie passes a zero gain, as in the control plane
    ],
)
def test_a_retrained_model_is_hot_loaded_only_past_the_gate(
    monkeypatch: pytest.MonkeyPatch,
    deployed: float,
    retrained: float,
    min_gain: float,
    hot_loaded: bool,
) -> None:
    import ray

    from deepedge.runtime.edge import edge_server

    monkeypatch.setattr(ray, "get", lambda value: value)
    actor = _Actor()
    old, new = _constant_state(1), _constant_state(2)
    table = [InferenceConfig(name="r1", accuracy_factor=1.0, gpu_demand=0.1)]
    runtime = StreamRuntime(
        stream=StreamWindow(stream_id="cam", current_accuracy=deployed, inference_configs=table),
        state=old, train=(np.zeros(0), np.zeros(0)), val=(np.zeros(0), np.zeros(0)),
        sample_fractions={"r1": 1.0}, actor=actor, min_gain=min_gain,
    )  # fmt: skip
    server = EdgeServer(ThiefScheduler(), gpus=1.0, window_s=10.0)
    outcome = server._complete(
        runtime, edge_server.RetrainingOutcome("cam", "e1", new, retrained, 1.0)
    )
    assert outcome.gate_passed is hot_loaded and outcome.deployed_accuracy == deployed
    assert bool(actor.loaded) is hot_loaded
    assert runtime.state is (new if hot_loaded else old)
    assert runtime.stream.current_accuracy == (retrained if hot_loaded else deployed)
