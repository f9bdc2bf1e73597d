"""Reads newer than asked, one at a time, at most one per gap, on an injected clock."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deepedge.dataplane.fresh_reads import FreshReads

GAP_S = 0.2


class Source:
    """A source on a fake clock: each read returns its number and when it began; a read
    takes ``read_s`` of the clock, and waits for ``gate`` when one is set."""

    def __init__(self, read_s: float = 0.0, fail: set[int] | None = None) -> None:
        self.now_s, self.read_s, self.fail = 0.0, read_s, fail or set()
        self.began: list[float] = []
        self.gate: asyncio.Event | None = None

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.now_s += seconds
        await asyncio.sleep(0)

    async def read(self) -> tuple[int, float]:
        number, began_s = len(self.began), self.now_s
        self.began.append(began_s)
        if self.gate is not None:
            await self.gate.wait()
        await self.sleep(self.read_s)
        if number in self.fail:
            raise ConnectionError(f"read {number} lost")
        return number, began_s

    def reads(self) -> FreshReads[tuple[int, float]]:
        return FreshReads(self.read, GAP_S, self.clock, self.sleep)


def test_concurrent_callers_share_one_read() -> None:
    source = Source(read_s=0.05)
    reads = source.reads()

    async def many() -> list[tuple[int, float]]:
        return await asyncio.gather(*(reads.fresh(0.0) for _ in range(100)))

    assert asyncio.run(many()) == [(0, 0.0)] * 100
    assert reads.reads == 1


def test_a_read_begun_before_the_caller_asked_does_not_answer_it() -> None:
    source = Source()
    reads = source.reads()

    async def scenario() -> tuple[tuple[int, float], tuple[int, float]]:
        source.gate = asyncio.Event()
        early = asyncio.ensure_future(reads.fresh(0.0))
        while not source.began:  # its read begins at 0.0 and waits at the gate
            await asyncio.sleep(0)
        source.now_s = 1.0
        late = asyncio.ensure_future(reads.fresh(1.0))  # asked after that read began
        await asyncio.sleep(0)
        source.gate.set()
        return await early, await late

    early, late = asyncio.run(scenario())
    assert early == (0, 0.0)
    assert late[0] == 1 and late[1] >= 1.0
    assert source.began == [0.0, 1.0]


def test_a_value_read_after_the_asked_moment_is_reused_without_a_read() -> None:
    source = Source()
    reads = source.reads()

    async def scenario() -> tuple[tuple[int, float], tuple[int, float]]:
        source.now_s = 5.0
        first = await reads.fresh(5.0)
        return first, await reads.fresh(4.0)  # a request that began before that read

    assert asyncio.run(scenario()) == ((0, 5.0), (0, 5.0))
    assert reads.reads == 1


@settings(deadline=None, max_examples=50)
@given(
    asks=st.lists(st.floats(min_value=0.0, max_value=0.5), min_size=1, max_size=40),
    read_s=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_reads_begin_at_least_a_gap_apart_and_each_answer_is_newer_than_asked(
    asks: list[float], read_s: float
) -> None:
    """A flood of callers (each one after the clock moved on by its ``asks`` step) is
    answered by reads begun a gap apart at least, each caller by a read begun after it
    asked: random keys cannot flood the source, and no caller gets an older table."""
    source = Source(read_s=read_s)
    reads = source.reads()

    async def flood() -> list[tuple[float, tuple[int, float]]]:
        async def one(asked_s: float) -> tuple[float, tuple[int, float]]:
            return asked_s, await reads.fresh(asked_s)

        callers = []
        for step_s in asks:
            source.now_s += step_s
            callers.append(asyncio.ensure_future(one(source.now_s)))
            await asyncio.sleep(0)
        return await asyncio.gather(*callers)

    answered = asyncio.run(flood())
    assert all(began_s >= asked_s for asked_s, (_, began_s) in answered)
    gaps = [b - a for a, b in itertools.pairwise(source.began)]
    assert all(gap >= GAP_S - 1e-9 for gap in gaps)
    assert reads.reads <= 1 + (source.now_s - source.began[0]) / GAP_S + 1e-9


def test_a_failed_read_fails_its_callers_and_the_next_caller_reads_again() -> None:
    source = Source(fail={0})
    reads = source.reads()

    async def scenario() -> tuple[int, float]:
        with pytest.raises(ConnectionError):
            await reads.fresh(0.0)
        return await reads.fresh(0.0)

    assert asyncio.run(scenario()) == (1, GAP_S)  # the retry waited its gap
    assert reads.reads == 2


def test_a_cancelled_caller_leaves_the_shared_read_to_the_others() -> None:
    source = Source()
    reads = source.reads()

    async def scenario() -> tuple[int, float]:
        source.gate = asyncio.Event()
        gone = asyncio.ensure_future(reads.fresh(0.0))
        stays = asyncio.ensure_future(reads.fresh(0.0))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        source.gate.set()
        return await stays

    assert asyncio.run(scenario()) == (0, 0.0)
    assert reads.reads == 1
