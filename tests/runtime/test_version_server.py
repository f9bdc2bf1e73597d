"""Versioned models, atomic swap under concurrent requests, rollback."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from deepedge.core.errors import ConflictError
from deepedge.learning.models import get_flat_weights, make_edge_model
from deepedge.runtime.serving.version_server import VersionServer

factory = functools.partial(make_edge_model, 10, 8, 2, 0)


def _constant_model(label: int) -> np.ndarray:
    """Weights of an edge model that predicts ``label`` for every input."""
    model = factory()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.head.bias[label] = 5.0
    return get_flat_weights(model)


def test_swap_is_atomic_under_concurrent_requests(tmp_path: Path) -> None:
    server = VersionServer(str(tmp_path), factory)
    v1 = server.deploy(_constant_model(1), None, "ones")
    v2 = server.registry.register(_constant_model(2), None, "twos").version
    images = np.random.default_rng(0).random((64, 1, 8, 8)).astype(np.float32)
    bad: list[tuple[int, set[int]]] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            reply = server.predict(images)
            labels = set(reply.labels.tolist())
            if labels != {reply.version}:  # version v serves the constant label v
                bad.append((reply.version, labels))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(60):
        server.swap_to(v2 if i % 2 == 0 else v1)
    stop.set()
    for t in threads:
        t.join()
    assert bad == []


def test_rollback_and_history_survive_restart(tmp_path: Path) -> None:
    server = VersionServer(str(tmp_path), factory)
    with pytest.raises(ConflictError):
        server.predict(np.zeros((1, 1, 8, 8), np.float32))
    server.deploy(_constant_model(3), 0.9, "good")
    server.deploy(_constant_model(4), 0.2, "bad")
    assert server.predict(np.zeros((2, 1, 8, 8), np.float32)).labels.tolist() == [4, 4]
    assert server.rollback() == 1
    assert server.predict(np.zeros((2, 1, 8, 8), np.float32)).labels.tolist() == [3, 3]
    reopened = VersionServer(str(tmp_path), factory)
    assert reopened.current_version() == 1
    assert [v.note for v in reopened.registry.versions] == ["good", "bad"]
