"""The gradient channel: pushes over the socket apply the PS's update, refuse bad input,
serve several workers at once, and fail loudly when the PS is gone."""

from __future__ import annotations

import multiprocessing
import threading
from dataclasses import replace

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.runtime.gradient_channel import (
    ChannelAddress,
    ChannelClosedError,
    GradientClient,
    GradientServer,
)
from deepedge.runtime.parameter_server import ParameterServer


@pytest.mark.parametrize(("lr", "momentum"), [(0.1, 0.0), (0.05, 0.9)])
def test_pushes_over_the_channel_match_direct_pushes(lr: float, momentum: float) -> None:
    rng = np.random.default_rng(1)
    grads = rng.normal(size=(5, 7)).astype(np.float32)
    direct = ParameterServer(np.zeros(7, np.float32), lr=lr, momentum=momentum)
    served = ParameterServer(np.zeros(7, np.float32), lr=lr, momentum=momentum)
    client = GradientClient(served.open_channel("127.0.0.1"), "w0")
    try:
        for step, g in enumerate(grads):
            want_version, want = direct.push("w0", g, step)
            version, got = client.push(g, step)
            assert version == want_version == step + 1
            np.testing.assert_array_equal(got, want)
    finally:
        client.close()
    assert served.stats().updates_by_worker == {"w0": 5}
    assert served.open_channel() == served.open_channel()  # opened once


def test_a_refused_push_raises_and_the_connection_stays_usable() -> None:
    ps = ParameterServer(np.zeros(3, np.float32), lr=0.1, momentum=0.0)
    client = GradientClient(ps.open_channel("127.0.0.1"), "w0")
    try:
        with pytest.raises(InvalidInputError, match="gradient shape"):
            client.push(np.ones(4, np.float32), 0)
        version, weights = client.push(np.ones(3, np.float32), 0)
        assert version == 1
        np.testing.assert_allclose(weights, -0.1)
    finally:
        client.close()


def test_a_client_without_the_servers_key_is_refused() -> None:
    ps = ParameterServer(np.zeros(3, np.float32))
    address = ps.open_channel("127.0.0.1")
    with pytest.raises(ChannelClosedError, match="cannot connect"):
        GradientClient(replace(address, authkey=b"not the key"), "intruder")
    # the server still serves the right key afterwards
    client = GradientClient(address, "w0")
    assert client.push(np.zeros(3, np.float32), 0)[0] == 1
    client.close()


def test_concurrent_workers_each_get_every_push_applied() -> None:
    ps = ParameterServer(np.zeros(4, np.float32), lr=1.0, momentum=0.0)
    address = ps.open_channel("127.0.0.1")
    pushes = 50

    def worker(i: int) -> None:
        client = GradientClient(address, f"w{i}")
        for step in range(pushes):
            client.push(np.full(4, 1.0, np.float32), step)
        client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = ps.stats()
    assert stats.version == 3 * pushes
    assert stats.updates_by_worker == {f"w{i}": pushes for i in range(3)}
    np.testing.assert_allclose(ps.pull()[1], -3.0 * pushes)  # no update lost or doubled


def _serve_forever(conn: multiprocessing.connection.Connection) -> None:
    server = GradientServer(lambda wid, g, v: (v + 1, g.tobytes()), "127.0.0.1")
    conn.send(server.address)
    threading.Event().wait()


def test_a_dead_parameter_server_raises_channel_closed() -> None:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve_forever, args=(child,), daemon=True)
    process.start()
    try:
        address: ChannelAddress = parent.recv()
        client = GradientClient(address, "w0")
        assert client.push(np.ones(2, np.float32), 4)[0] == 5
        process.kill()
        process.join()
        with pytest.raises(ChannelClosedError):
            client.push(np.ones(2, np.float32), 5)
    finally:
        process.kill()
