"""Where a deployment's windows begin and end: at their due time, or early, where the
inputs moved.

Windows are due every ``window_s``; a window begins where the one before it ended. A
camera's condition changes at an instant, not at a window's edge, and a window that holds
two conditions decides on neither: its drift severity is a mix (no kept version's data
looks like it), its labels a blend. So while a window is open the loop tests, every
:data:`MOVED_CHECK_S`, whether its newest sampled inputs come from another condition than
those before them (:func:`deepedge.learning.change_point.moved_at`: inputs only, no model,
no label; about a millisecond). When they do, the window ends at the first input of the new
condition and is decided as any other; the next window holds the new condition only and
is short (:data:`MOVED_WINDOW_SHARE` of ``window_s``) and labelled at the recovery share,
so a condition that comes back is told, and its kept version serves again, seconds after
it came, not a window or two later. Windows are due every ``window_s`` from there on. A
condition that came at a window's edge fills the whole next window: that window, after one
of full length, ends once it has lasted :data:`MOVED_WINDOW_SHARE` of ``window_s`` when
all of its inputs are told apart from the window's before (:func:`moved_whole_end`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from deepedge.controlplane.records import WindowPoint
from deepedge.dataplane.sample_store import StoredSample
from deepedge.learning.change_point import moved_at, moved_whole

MOVED_CHECK_S = 0.5  # how often an open window's newest inputs are tested
MOVED_WINDOW_SHARE = 0.4  # the window after a move lasts this share of window_s
MOVED_LOOK_S = 30.0  # the newest seconds of a window tested, and as many before them


def moved_look(start: float, now: float, window_s: float) -> tuple[float, float, float]:
    """The spans the open window ``[start, now)`` is tested on: ``[a - l, a)`` before and
    ``[a, now)``, with ``l = min(window_s, MOVED_LOOK_S)`` and ``a = max(start, now - l)``
    (a longer window is tested on its newest seconds: a change older than that within it
    is left to the window's end)."""
    look = min(window_s, MOVED_LOOK_S)
    a = max(start, now - look)
    return a - look, a, now


MAX_SHORT_WINDOWS = 4  # windows shorter than window_s in a row (the one that ended where
# its inputs moved, then short ones) while evidence or samples are awaited


def short_run(history: Sequence[WindowPoint], due: float, window_s: float) -> int:
    """How many windows in a row, the one due at ``due`` included, were shorter than
    ``window_s`` (``history``: the windows before it)."""
    dues = [w.due_at for w in history] + [due]
    short = 0
    for before, after in zip(reversed(dues[:-1]), reversed(dues[1:]), strict=True):
        if not follows_a_move(after, before, window_s):
            break
        short += 1
    return short


def window_start(due: float, window_s: float, history: Sequence[WindowPoint]) -> float:
    """Where the window due at ``due`` begins: where the window before it ended (its
    ``due_at``), at most ``window_s`` before ``due``."""
    start = due - window_s
    return max(start, history[-1].due_at) if history else start


def follows_a_move(due: float, start: float, window_s: float) -> bool:
    """Whether the window ``[start, due)`` is the short one after a window ended early."""
    return due - start < window_s * (1.0 - 1e-9)


def moved_end(before: Sequence[StoredSample], window: Sequence[StoredSample]) -> float | None:
    """When the open window's inputs ``window`` (oldest first) moved from those ``before``
    it: the time of its first input of the new condition, or None."""
    inputs = _inputs(before, window)
    k = None if inputs is None else moved_at(*inputs)
    return None if k is None else window[k].at


def _inputs(before: Sequence[StoredSample],
            window: Sequence[StoredSample]) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """The inputs of ``before`` and ``window`` as two arrays, or None (either empty, or
    inputs of different shapes)."""
    if not before or not window or len({s.input.shape for s in (*before, *window)}) != 1:
        return None
    return np.stack([s.input for s in before]), np.stack([s.input for s in window])


def moved_whole_end(before: Sequence[StoredSample], window: Sequence[StoredSample],
                    start: float, now: float, window_s: float,
                    history: Sequence[WindowPoint]) -> float | None:  # fmt: skip
    """``now``, where the open window ``[start, now)`` ends because it holds a new condition
    whole (:func:`~deepedge.learning.change_point.moved_whole` on ``window``'s inputs
    against ``before``'s): it follows a window of full length and has lasted
    :data:`MOVED_WINDOW_SHARE` of ``window_s``; None otherwise."""
    if len(history) < 2 or now - start < MOVED_WINDOW_SHARE * window_s:
        return None
    if history[-1].due_at - history[-2].due_at < window_s * (1.0 - 1e-9):
        return None  # the short window after a move: the window before it was the move
    inputs = _inputs(before, window)
    return now if inputs is not None and moved_whole(*inputs) else None
