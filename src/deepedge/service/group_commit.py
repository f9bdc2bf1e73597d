"""Group commit of submissions: concurrent submits share one durable transaction.

With ``synchronous=FULL`` every commit costs an fsync (milliseconds on a real disk), and
on SQLite commits are serialised. Committing each submission alone caps the API at about
one submission per fsync and keeps a worker thread blocked per waiting request. Here one
writer thread takes every submission that is waiting, commits them together with
:meth:`JobStore.submit_many`, and only then answers each of them:

    batch k   = all submissions queued while batch k-1 was committing (at most ``max_batch``)
    latency   <= time to finish batch k-1 + time to commit batch k   (two commits at most)
    fsyncs/s  = batches/s, not submissions/s

Acknowledge-after-commit is unchanged: a caller's future resolves only after the commit
that holds its row has returned; if that commit fails, every caller of the batch gets the
error and none of their rows exists.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from deepedge.service.records import JobRecord
from deepedge.service.store import JobStore, Submission

log = logging.getLogger(__name__)

Outcome = tuple[JobRecord, bool] | BaseException
MAX_BATCH = 256


@dataclass(frozen=True)
class _Waiting:
    submission: Submission
    deliver: Callable[[Outcome], None]


class SubmissionCommitter:
    """One writer thread that commits queued submissions in batches."""

    def __init__(self, store: JobStore, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[_Waiting | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="deepedge-commit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def submit_later(self, submission: Submission, deliver: Callable[[Outcome], None]) -> None:
        """Queue a submission; ``deliver`` is called from the writer thread after its commit."""
        self._queue.put(_Waiting(submission, deliver))

    async def submit(self, submission: Submission) -> tuple[JobRecord, bool]:
        """Await the durable commit of one submission (from an event loop)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[JobRecord, bool]] = loop.create_future()

        def settle(outcome: Outcome) -> None:
            if future.done():  # the caller went away (cancelled): the job is committed anyway
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        def deliver(outcome: Outcome) -> None:  # on the writer thread: hop to the loop
            loop.call_soon_threadsafe(settle, outcome)

        self.submit_later(submission, deliver)
        return await future

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            self._commit(batch)

    def _commit(self, batch: list[_Waiting]) -> None:
        outcomes: list[Outcome]
        try:
            outcomes = list(self.store.submit_many([w.submission for w in batch]))
        except Exception as exc:  # the whole transaction rolled back: nothing was stored
            if len(batch) > 1:
                # One bad row must not fail its neighbours: commit each on its own.
                log.warning("group commit of %d failed (%s); one by one", len(batch), exc)
                for waiting in batch:
                    self._commit([waiting])
                return
            log.exception("commit of a submission failed")
            outcomes = [exc]
        for waiting, outcome in zip(batch, outcomes, strict=True):
            try:
                waiting.deliver(outcome)
            except Exception:
                log.exception("could not answer a committed submission")
