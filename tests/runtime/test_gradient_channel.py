"""The gradient channel: pushes over the socket apply the PS's update, refuse bad input,
serve several workers at once, fail loudly when the PS is gone, send raw contiguous
buffers (no pickle), and compress to float16 within its stated error."""

from __future__ import annotations

import multiprocessing
import os
import socket
import struct
import threading
from dataclasses import replace
from multiprocessing.connection import Listener

import numpy as np
import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.runtime.training.gradient_channel import (
    ChannelAddress,
    ChannelClosedError,
    GradientClient,
    GradientEncoding,
    GradientServer,
    decode_fp16,
    decode_fp16_in_place,
    encode_fp16,
)
from deepedge.runtime.training.parameter_server import ParameterServer


@pytest.mark.parametrize(("lr", "momentum"), [(0.1, 0.0), (0.05, 0.9)])
def test_pushes_over_the_channel_match_direct_pushes(lr: float, momentum: float) -> None:
    rng = np.random.default_rng(1)
    grads = rng.normal(size=(5, 7)).astype(np.float32)
    direct = ParameterServer(np.zeros(7, np.float32), lr=lr, momentum=momentum)
    served = ParameterServer(np.zeros(7, np.float32), lr=lr, momentum=momentum)
    client = GradientClient(served.open_channel("127.0.0.1"), "w0", 7)
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
    client = GradientClient(ps.open_channel("127.0.0.1"), "w0", 3)
    try:
        for wrong in (np.ones(4, np.float32), np.ones(2, np.float32)):
            with pytest.raises(InvalidInputError, match="gradient shape"):
                client.push(wrong, 0)
        version, weights = client.push(np.ones(3, np.float32), 0)
        assert version == 1
        np.testing.assert_allclose(weights, -0.1)
    finally:
        client.close()


def test_a_client_without_the_servers_key_is_refused() -> None:
    ps = ParameterServer(np.zeros(3, np.float32))
    address = ps.open_channel("127.0.0.1")
    with pytest.raises(ChannelClosedError, match="cannot connect"):
        GradientClient(replace(address, authkey=b"not the key"), "intruder", 3)
    # the server still serves the right key afterwards
    client = GradientClient(address, "w0", 3)
    assert client.push(np.zeros(3, np.float32), 0)[0] == 1
    client.close()


def test_concurrent_workers_each_get_every_push_applied() -> None:
    ps = ParameterServer(np.zeros(4, np.float32), lr=1.0, momentum=0.0)
    address = ps.open_channel("127.0.0.1")
    pushes = 50

    def worker(i: int) -> None:
        client = GradientClient(address, f"w{i}", 4)
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


def _echo(worker_id: str, gradient: np.ndarray, base_version: int, out: np.ndarray) -> int:
    np.copyto(out, gradient)
    return base_version + 1


def _serve_forever(conn: multiprocessing.connection.Connection) -> None:
    server = GradientServer(_echo, 2, "127.0.0.1")
    conn.send(server.address)
    threading.Event().wait()


def test_a_dead_parameter_server_raises_channel_closed() -> None:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve_forever, args=(child,), daemon=True)
    process.start()
    try:
        address: ChannelAddress = parent.recv()
        client = GradientClient(address, "w0", 2)
        assert client.push(np.ones(2, np.float32), 4)[0] == 5
        process.kill()
        process.join()
        with pytest.raises(ChannelClosedError):
            client.push(np.ones(2, np.float32), 5)
    finally:
        process.kill()


@pytest.mark.parametrize("encoding", list(GradientEncoding))
def test_the_client_sends_a_header_and_the_raw_contiguous_gradient(
    encoding: GradientEncoding,
) -> None:
    """What goes over the wire after the authenticated hello: a 21-byte header, then
    exactly the gradient's bytes (no pickle, no other layout); the reply's weights are
    read into the client's own buffer."""
    key = b"k" * 32
    listener = Listener(("127.0.0.1", 0), authkey=key)
    seen: list[bytes] = []

    def read(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk
            data += chunk
        return data

    def fake_ps() -> None:
        conn = listener.accept()
        seen.append(conn.recv_bytes())  # worker id
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        conn.close()
        header = read(sock, 21)
        seen.append(header)
        seen.append(read(sock, struct.unpack("<qBfQ", header)[3]))
        reply = np.arange(5, dtype=np.float32).tobytes()
        sock.sendall(struct.pack("<BqQ", 0, 9, len(reply)) + reply)
        sock.close()

    thread = threading.Thread(target=fake_ps)
    thread.start()
    host, port = listener.address
    client = GradientClient(ChannelAddress(host, port, key), "w7", 5, encoding)
    gradient = np.array([0.5, -0.25, 1e-3, 0.0, 2.0], np.float32)
    version, weights = client.push(gradient, 3)
    thread.join()
    listener.close()
    client.close()
    assert seen[0] == b"w7"
    base_version, code, scale, nbytes = struct.unpack("<qBfQ", seen[1])
    assert base_version == 3 and nbytes == len(seen[2])
    if encoding is GradientEncoding.FLOAT32:
        assert code == 0 and seen[2] == gradient.tobytes()
    else:
        assert code == 1 and len(seen[2]) == 2 * gradient.size  # half the bytes
        np.testing.assert_allclose(
            np.frombuffer(seen[2], np.float16).astype(np.float32) / scale, gradient, rtol=2**-11
        )
    assert version == 9
    np.testing.assert_array_equal(weights, np.arange(5, dtype=np.float32))


def test_reply_views_rotate_over_the_clients_buffers() -> None:
    ps = ParameterServer(np.zeros(3, np.float32), lr=1.0, momentum=0.0)
    client = GradientClient(ps.open_channel("127.0.0.1"), "w0", 3, reply_buffers=2)
    try:
        _, first = client.push(np.ones(3, np.float32), 0)
        _, second = client.push(np.ones(3, np.float32), 1)
        np.testing.assert_array_equal(first, -1.0)  # still valid after 1 more push
        np.testing.assert_array_equal(second, -2.0)
        client.push(np.ones(3, np.float32), 2)
        np.testing.assert_array_equal(first, -3.0)  # the first buffer's turn again
        assert not np.shares_memory(first, second)
    finally:
        client.close()


@pytest.mark.parametrize("encoding", [GradientEncoding.FLOAT32, GradientEncoding.FLOAT16])
def test_a_reply_can_land_in_the_gradient_just_sent(encoding: GradientEncoding) -> None:
    ps = ParameterServer(np.zeros(3, np.float32), lr=1.0, momentum=0.0)
    client = GradientClient(ps.open_channel("127.0.0.1"), "w0", 3, encoding, reply_buffers=0)
    try:
        gradient = np.array([1.0, 2.0, 4.0], np.float32)
        version, weights = client.push(gradient, 0, reply_into=gradient)
        assert version == 1
        assert np.shares_memory(weights, gradient)
        np.testing.assert_array_equal(gradient, [-1.0, -2.0, -4.0])  # the PS applied it
        np.testing.assert_array_equal(ps.pull()[1], gradient)
        with pytest.raises(InvalidInputError):  # no buffer of its own to receive into
            client.push(np.ones(3, np.float32), 1)
    finally:
        client.close()


def test_a_pull_returns_the_weights_without_an_update() -> None:
    ps = ParameterServer(np.zeros(3, np.float32), lr=1.0, momentum=0.5)
    client = GradientClient(ps.open_channel("127.0.0.1"), "w0", 3, reply_buffers=1)
    try:
        client.push(np.ones(3, np.float32), 0)
        into = np.full(3, 7.0, np.float32)
        version, weights = client.pull(reply_into=into)
        assert version == 1 and ps.stats().version == 1  # nothing applied, momentum kept
        np.testing.assert_array_equal(weights, -1.0)
        assert np.shares_memory(weights, into)
    finally:
        client.close()


def test_a_server_without_pulls_refuses_one_and_stays_usable() -> None:
    applied: list[int] = []

    def push(worker: str, gradient: np.ndarray, base: int, out: np.ndarray) -> int:
        applied.append(base)
        out[:] = gradient
        return len(applied)

    server = GradientServer(push, 2)
    client = GradientClient(server.address, "w0", 2)
    try:
        with pytest.raises(InvalidInputError, match="no pulls"):
            client.pull()
        assert client.push(np.ones(2, np.float32), 5)[0] == 1
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize(("size", "chunk"), [(1, 4), (4, 4), (5, 4), (17, 4), (64, 3), (100, 1000)])
def test_fp16_decodes_in_place_as_into_a_buffer_of_its_own(size: int, chunk: int) -> None:
    gradient = np.random.default_rng(size).normal(size=size).astype(np.float32)
    half = np.empty(size, np.float16)
    scale = encode_fp16(gradient, half)
    expected = decode_fp16(half, scale, np.empty(size, np.float32))
    buffer = bytearray(4 * size)
    buffer[: 2 * size] = half.tobytes()
    got = decode_fp16_in_place(buffer, size, scale, chunk)
    np.testing.assert_array_equal(got, expected)
    assert np.shares_memory(got, np.frombuffer(buffer, np.uint8))


@pytest.mark.parametrize("peak", [1e-6, 3e-3, 2.0, 5e3])
def test_fp16_round_trip_is_within_its_error_bound(peak: float) -> None:
    rng = np.random.default_rng(3)
    gradient = (rng.normal(size=10_000) * peak / 4).astype(np.float32)
    gradient[0] = peak  # the largest component
    half = np.empty(gradient.size, np.float16)
    scale = encode_fp16(gradient, half)
    assert np.isfinite(half).all() and np.abs(half).max() < 65504
    assert np.log2(scale) == int(np.log2(scale))  # a power of two: scaling is exact
    back = decode_fp16(half, scale, np.empty(gradient.size, np.float32))
    bound = np.abs(gradient) * 2.0**-11 + 2.0**-24 / scale
    assert (np.abs(back - gradient) <= bound).all()
    # and it is lossy: float16 keeps 11 significant bits, not float32's 24
    assert not np.array_equal(back, gradient)


def test_fp16_pushes_over_the_channel_track_float32_pushes() -> None:
    rng = np.random.default_rng(2)
    grads = rng.normal(size=(20, 1000)).astype(np.float32) * 1e-2
    exact = ParameterServer(np.zeros(1000, np.float32), lr=0.1, momentum=0.9)
    served = ParameterServer(np.zeros(1000, np.float32), lr=0.1, momentum=0.9)
    client = GradientClient(served.open_channel("127.0.0.1"), "w0", 1000, GradientEncoding.FLOAT16)
    try:
        for step, g in enumerate(grads):
            _, want = exact.push("w0", g, step)
            _, got = client.push(g, step)
            assert got.dtype == np.float32
            assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()
    finally:
        client.close()
    zeros = GradientClient(served.open_channel(), "w1", 1000, GradientEncoding.FLOAT16)
    version, _ = zeros.push(np.zeros(1000, np.float32), 20)  # an all-zero gradient: scale 1
    zeros.close()
    assert version == 21
