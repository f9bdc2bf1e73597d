"""The one progress helper of the commands that take more than a few seconds.

On a terminal it is a rich progress bar on stderr (description, bar, done/total, elapsed,
time left, the latest note); elsewhere (a pipe, a log file, CI) it writes one plain line per
change of note, with the elapsed time and the ETA when the caller knows one, so a captured
log reads as the run's story. stdout stays the command's result alone: a command may go on
printing its own lines to stdout under the bar (the demo's story, the camera's windows); they
are drawn above the bar only when stdout is the same terminal, and left on stdout otherwise
(``deepedge demo > story.txt`` keeps the whole story in the file).

    with progress("update", total=10, unit="epochs") as bar:
        bar.update(3, note="epoch 3: accuracy 0.912")
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from deepedge.cli.render import duration


class Progress:
    """A task's progress: :meth:`update` moves it, :meth:`say` prints a line above it."""

    def __init__(
        self, description: str, total: float | None, unit: str, stream: TextIO | None = None
    ) -> None:
        from rich.console import Console

        self.description = description
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.note = ""
        self.left_s: float | None = None
        self._stream = stream or sys.stderr
        self._started = time.monotonic()
        self._console = Console(file=self._stream, stderr=stream is None)
        self._bar: Any = None
        self._task: Any = None
        if self._console.is_terminal:
            self._bar = _rich_bar(self._console, redirect_stdout=_is_terminal(sys.stdout))
            self._task = self._bar.add_task(description, total=total, note="")

    def start(self) -> None:
        if self._bar is not None:
            self._bar.start()

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(
        self,
        done: float | None = None,
        total: float | None = None,
        note: str | None = None,
        left_s: float | None = None,
    ) -> None:
        """Set how much is done (and the total, when it became known), the note and the
        caller's estimate of the time left (the bar on a terminal estimates its own)."""
        if total is not None:
            self.total = total
        if done is not None:
            self.done = done
        if left_s is not None:
            self.left_s = left_s
        changed = note is not None and note != self.note
        if note is not None:
            self.note = note
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, total=self.total, note=self.note)
        elif changed:
            self._line(self.note)

    def say(self, message: str) -> None:
        """A line of the story (above the bar on a terminal)."""
        if self._bar is not None:
            self._bar.console.print(message, markup=False, highlight=False)
        else:
            self._line(message)

    def _line(self, message: str) -> None:
        count = ""
        if self.total:
            count = f"[{self.done:g}/{self.total:g} {self.unit}] "
        times = duration(time.monotonic() - self._started)
        if self.left_s is not None:
            times += f", ETA {duration(self.left_s)}"
        self._stream.write(f"{self.description}: {count}{message} ({times})\n")
        self._stream.flush()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _rich_bar(console: Any, redirect_stdout: bool) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"),
        console=console,
        transient=False,
        # rich would send stdout through the bar's console (stderr) whenever stderr is a
        # terminal, which empties a redirected stdout while the bar is shown
        redirect_stdout=redirect_stdout,
    )


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "") -> Iterator[Progress]:
    """A :class:`Progress` shown for the duration of the block."""
    bar = Progress(description, total, unit)
    bar.start()
    try:
        yield bar
    finally:
        bar.stop()
