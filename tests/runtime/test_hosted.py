"""runtime/training/hosted: an object in its own actor process, its state kept across calls."""

from __future__ import annotations

import os

import pytest
import ray

from _support import wait_until
from deepedge.runtime.training.hosted import hosted

pytestmark = pytest.mark.ray


def test_a_hosted_object_keeps_its_state_in_another_process_until_the_block_ends(
    ray_cluster: None,
) -> None:
    class Tally:  # local: pickled by value (the workers cannot import a test module)
        def __init__(self, start: int) -> None:
            self.total = start

        def add(self, amount: int, times: int = 1) -> int:
            self.total += amount * times
            return self.total

        def pid(self) -> int:
            return os.getpid()

    with hosted(Tally, 10) as tally:
        assert tally.call(Tally.add, 2) == 12
        assert tally.call(Tally.add, 3, times=2) == 18  # the same instance, state kept
        assert tally.call(Tally.pid) != os.getpid()
        handle = tally._handle

    def dead() -> bool:
        try:
            ray.get(handle.pid.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return True
        except ray.exceptions.GetTimeoutError:
            return False
        return False  # ray.kill is asynchronous: a call right after it may still be served

    assert wait_until(dead, timeout_s=120, interval_s=0.2), "the actor outlived its block"
