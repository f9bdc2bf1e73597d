"""Carrying a recorded retraining outcome over to a model that starts somewhere else.

A recorded trace measures retraining configuration ``c`` in window ``w`` from the model
that ``c``'s own chain deployed: the model that retraining with ``c`` in every earlier
window produced (:mod:`deepedge.sim.recorded`). A scheduler that switches configurations,
or skips windows, starts ``c`` from a different model. Crediting it with ``c``'s recorded
``accuracy_after`` would hand it the adaptation of every earlier window of ``c``'s chain
for free.

When a row carries ``start_accuracy`` ``s_c`` (the accuracy, on the window's data, of the
model its retraining started from), the simulator instead uses the *gap-closing* model:
retraining with ``c`` closes a fixed fraction ``phi_c`` of the gap between the starting
accuracy and the window's ceiling ``C`` (the best accuracy any configuration reached in the
window)::

    phi_c = clip((a_c - s_c) / (C - s_c), 0, 1)        a_c(x) = x + phi_c (C - x)

so a stream whose deployed model has accuracy ``x`` ends at ``a_c(x)``; at ``x = s_c`` this is
exactly the measured ``a_c``. A configuration that lowered accuracy (``a_c < s_c``) keeps its
measured loss, ``a_c(x) = x - (s_c - a_c)``; a start at or above the ceiling keeps the
measured change, ``a_c(x) = x + (a_c - s_c)``. The estimate the scheduler sees is carried over
the same way, with the estimates' own ceiling: the micro-profiler's view of how much of the
gap ``c`` closes. Rows without ``start_accuracy`` (synthetic traces, the paper's example) are
absolute outcomes and are left as they are.
"""

from __future__ import annotations

from deepedge.sim.trace import TraceRetraining, TraceStreamWindow

_EPS = 1e-6


def transferred_accuracy(after: float, start: float, ceiling: float, current: float) -> float:
    """``a_c(current)`` of the module docstring for one measured ``(start, after)`` pair."""
    if after < start or ceiling - start <= _EPS:
        value = current + (after - start)
    else:
        phi = min(1.0, (after - start) / (ceiling - start))
        value = current + phi * (ceiling - current)
    return min(1.0, max(0.0, value))


def transfer_row(row: TraceStreamWindow, current: float) -> TraceStreamWindow:
    """``row`` with every retraining outcome carried over to a start at ``current``."""
    recorded = [c for c in row.retraining if c.start_accuracy is not None]
    if not recorded:
        return row
    ceiling = max(c.accuracy_after for c in recorded)
    est_ceiling = max(c.est_accuracy for c in recorded)
    carried: list[TraceRetraining] = []
    for c in row.retraining:
        if c.start_accuracy is None:
            carried.append(c)
            continue
        update: dict[str, float] = {
            "accuracy_after": round(
                transferred_accuracy(c.accuracy_after, c.start_accuracy, ceiling, current), 6
            )
        }
        if c.estimated_accuracy_after is not None:
            update["estimated_accuracy_after"] = round(
                transferred_accuracy(
                    c.estimated_accuracy_after, c.start_accuracy, est_ceiling, current
                ),
                6,
            )
        carried.append(c.model_copy(update=update))
    return row.model_copy(update={"retraining": carried})
