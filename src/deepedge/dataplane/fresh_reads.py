"""Reads of a changing source that are newer than a given moment, shared and rate-bounded.

:meth:`FreshReads.fresh` answers ``fresh(after_s)`` with a value whose read *began* at or
after ``after_s`` (on the injected clock), so whatever the source held at ``after_s`` is in
it. Three promises:

* **newer than asked**: a value read before ``after_s`` never answers; a caller that finds
  an older read under way waits it out and has the next one begin for it;
* **single flight**: at most one read runs at a time, and every caller it can answer waits
  on that one (a thousand concurrent callers cost one read);
* **rate-bounded**: a read begins no sooner than ``min_gap_s`` after the one before began,
  so however many callers come, the source is read at most ``1 / min_gap_s`` times a
  second; a caller waits at most about ``min_gap_s`` plus two reads.

A read that raises fails the callers it was to answer (they decide what to do without it);
the next caller begins another. A caller that is cancelled leaves the shared read running
for the others. Pure asyncio: the clock and the sleep are injected.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FreshReads(Generic[T]):
    """``read`` shared and rate-bounded (module docstring)."""

    def __init__(
        self, read: Callable[[], Awaitable[T]], min_gap_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:  # fmt: skip
        self._read, self.min_gap_s = read, min_gap_s
        self._clock, self._sleep = clock, sleep
        self._newest: tuple[float, T] | None = None  # (when its read began, the value)
        self._flight: asyncio.Future[T] | None = None  # the read under way or waiting its gap
        self._flight_began_s: float | None = None  # None: it has not begun reading yet
        self._last_began_s: float | None = None
        self.reads = 0  # reads begun (for tests and figures)

    async def fresh(self, after_s: float) -> T:
        """A value whose read began at or after ``after_s`` (module docstring)."""
        while True:
            if self._newest is not None and self._newest[0] >= after_s:
                return self._newest[1]
            flight = self._flight
            if flight is None or flight.done():
                flight = self._flight = asyncio.ensure_future(self._read_next())
            began_s = self._flight_began_s  # (None: not begun, so it begins after now)
            if after_s <= self._clock() if began_s is None else began_s >= after_s:
                return await asyncio.shield(flight)
            with contextlib.suppress(Exception):  # an older read: only its end matters here
                await asyncio.shield(flight)

    async def _read_next(self) -> T:
        if self._last_began_s is not None:
            wait_s = self._last_began_s + self.min_gap_s - self._clock()
            if wait_s > 0:
                await self._sleep(wait_s)
        began_s = self._flight_began_s = self._last_began_s = self._clock()
        self.reads += 1
        try:
            value = await self._read()
        finally:
            self._flight_began_s = None
        if self._newest is None or began_s >= self._newest[0]:
            self._newest = (began_s, value)
        return value
