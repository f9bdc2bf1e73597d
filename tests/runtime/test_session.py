"""Where ensure_ray gets its Ray: embedded by default, a cluster when an address is given."""

from __future__ import annotations

from typing import Any

import pytest

from deepedge.runtime.cluster import session


@pytest.mark.parametrize(
    ("argument", "env", "expected"),
    [
        (None, None, None),  # embedded
        ("local", None, None),
        (None, "local", None),
        (None, "10.0.0.1:6379", "10.0.0.1:6379"),
        ("10.0.0.2:6379", "10.0.0.1:6379", "10.0.0.2:6379"),  # the flag beats the variable
        ("", "10.0.0.1:6379", "10.0.0.1:6379"),  # an empty flag is no flag
        (" auto ", None, "auto"),
    ],
)
def test_cluster_address_resolution(
    monkeypatch: pytest.MonkeyPatch, argument: str | None, env: str | None, expected: str | None
) -> None:
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    assert session.cluster_address(argument) == expected


@pytest.fixture
def recorded_init(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """ray.init replaced by a recorder (unit test of the arguments only; no Ray starts)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(session.ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(
        session, "_authenticate_like_ray_start", lambda: calls.append({"auth": "token-if-any"})
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_the_embedded_default_starts_its_own_local_ray(recorded_init: list[dict[str, Any]]) -> None:
    assert session.ensure_ray(num_cpus=3) is True
    (kwargs,) = recorded_init  # no token set-up: a new local Ray makes its own
    # "local": a cluster that `ray start` left on this machine must never capture the run.
    assert kwargs["address"] == "local"
    assert kwargs["num_cpus"] == 3


@pytest.mark.parametrize("via_env", [False, True])
def test_connecting_passes_no_local_only_option(
    recorded_init: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, via_env: bool
) -> None:
    if via_env:
        monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    address = None if via_env else "10.0.0.1:6379"
    assert session.ensure_ray(num_cpus=3, address=address) is True
    auth, kwargs = recorded_init  # the token is set up first, as `ray start --address` does
    assert auth == {"auth": "token-if-any"}
    assert kwargs["address"] == "10.0.0.1:6379"
    local_only = {"num_cpus", "num_gpus", "resources", "object_store_memory", "_system_config"}
    assert not local_only & set(kwargs)


def test_an_embedded_start_that_times_out_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's fixed 30 s raylet wait, missed on a loaded machine, costs one more start, not
    the run; after the last attempt, or on any other error, the error is raised."""
    calls: list[dict[str, Any]] = []
    stopped: list[int] = []

    def init(**kwargs: Any) -> None:
        calls.append(kwargs)
        if len(calls) < 3:
            raise Exception("The current node timed out during startup. This could happen")

    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(session.ray, "init", init)
    monkeypatch.setattr(session, "_stop_failed_start", lambda before: stopped.append(1))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert session.ensure_ray(num_cpus=1) is True
    assert len(calls) == 3 and len(stopped) == 2 and calls[-1]["address"] == "local"

    calls.clear()
    monkeypatch.setattr(session, "START_ATTEMPTS", 2)
    with pytest.raises(Exception, match="timed out during startup"):
        session.ensure_ray(num_cpus=1)
    assert len(calls) == 2

    def broken(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise ValueError("num_cpus must be positive")

    calls.clear()
    monkeypatch.setattr(session.ray, "init", broken)
    with pytest.raises(ValueError):
        session.ensure_ray(num_cpus=1)
    assert len(calls) == 1


def test_the_raylet_wait_is_stretched_only_while_ray_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray's node module sees a clock that runs 30/150 as fast while ``ray.init`` runs (so
    its fixed 30 s raylet wait lasts 150 s), and the real ``time`` module before and after,
    also when the start fails."""
    import time

    from ray._private import node as ray_node

    class Fake:
        now = 1000.0

        def monotonic(self) -> float:
            return self.now

        def sleep(self, seconds: float) -> None:
            self.now += seconds

    fake = Fake()
    clock = session._PatientClock(fake, session.RAY_RAYLET_WAIT_S / session.RAYLET_WAIT_S)
    fake.sleep(150.0)
    assert clock.monotonic() == pytest.approx(1000.0 + 30.0)  # Ray's 30 s end at 150 real
    assert clock.sleep == fake.sleep  # everything else is the real module's

    seen: list[object] = []

    def init(**kwargs: Any) -> None:
        seen.append(ray_node.time)
        raise RuntimeError("some other start failure")

    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(session.ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert ray_node.time is time
    with pytest.raises(RuntimeError):
        session.ensure_ray(num_cpus=1)
    assert isinstance(seen[0], session._PatientClock)
    assert ray_node.time is time  # restored after the failed start


@pytest.mark.parametrize(
    ("address", "on_loopback"),
    [
        (None, True),  # an embedded Ray: a node on 127.0.0.1, listening there only
        ("127.0.0.1:6379", True),  # a head on loopback: Ray must not swap in the host's IP
        ("localhost:6379", True),
        ("[::1]:6379", True),
        ("10.0.0.1:6379", False),  # a cluster's head: the address the operator gave
        ("head.example:6379", False),
    ],
)
def test_ray_takes_loopback_at_its_word_only_for_a_node_on_loopback(
    monkeypatch: pytest.MonkeyPatch, address: str | None, on_loopback: bool
) -> None:
    from ray._private import ray_constants

    seen: list[tuple[bool, str | None]] = []
    monkeypatch.setattr(session.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(session, "check_reachable", lambda _address: None)
    monkeypatch.setattr(session, "_authenticate_like_ray_start", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)

    def init(**_kwargs: Any) -> None:
        seen.append((ray_constants.ENABLE_RAY_CLUSTER,
                     session.os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")))  # fmt: skip

    monkeypatch.setattr(session.ray, "init", init)
    before = ray_constants.ENABLE_RAY_CLUSTER
    assert session.ensure_ray(address=address) is True
    assert seen == ([(False, "0")] if on_loopback else [(before, None)])
    assert ray_constants.ENABLE_RAY_CLUSTER is before  # as it was, once Ray has started
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in session.os.environ


@pytest.mark.parametrize(
    ("node", "asked", "bound"),
    [
        ("127.0.0.1", "[::]:0", "127.0.0.1:0"),  # Serve's replica server on a loopback node
        ("127.0.0.1", "0.0.0.0:8000", "127.0.0.1:8000"),
        ("10.0.0.5", "[::]:0", "10.0.0.5:0"),  # a node's own address, never every interface
        ("fd00::2", "[::]:0", "[fd00::2]:0"),
        ("127.0.0.1", "10.0.0.9:7000", "10.0.0.9:7000"),  # an address chosen: kept
    ],
)
def test_a_worker_binds_servers_meant_for_every_interface_on_its_node(
    monkeypatch: pytest.MonkeyPatch, node: str, asked: str, bound: str
) -> None:
    from ray._common import tls_utils

    assert session.node_address(asked, node) == bound
    calls: list[str] = []
    monkeypatch.setattr(tls_utils, "add_port_to_grpc_server",
                        lambda _server, address: calls.append(address) or 1)  # fmt: skip
    monkeypatch.setattr(session.ray.util, "get_node_ip_address", lambda: node)
    session.bind_servers_on_node()  # as a worker's start-up hook
    assert tls_utils.add_port_to_grpc_server(object(), asked) == 1
    assert calls == [bound]
