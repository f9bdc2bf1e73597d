"""The accuracy gate: whether a retrained model may replace the model that serves.

A candidate ``c`` retrained from the serving model ``p`` passes when, on held-out data ``H``
both are scored on (golden-labelled, never trained on)::

    acc_c(H) >= acc_p(H) + min_gain

and with no rival (a first version) it passes. The Ekya edge server gates every hot-load of
a retrained model with it (:class:`deepedge.runtime.edge.edge_server.EdgeServer`), so it never
serves a model that scored lower than the one it would replace. (The control plane gates on
paired evidence instead, :mod:`deepedge.controlplane.evidence`.)
"""

from __future__ import annotations

TIE = 1e-12  # equal scores pass a zero min_gain despite float rounding


def passes_gate(candidate_accuracy: float, rival_accuracy: float | None, min_gain: float) -> bool:
    if rival_accuracy is None:
        return True
    return candidate_accuracy >= rival_accuracy + min_gain - TIE
