"""Bring your own workload: the user's model, data and labeller.

:mod:`~deepedge.workload.spec` is the document, :mod:`~deepedge.workload.model` builds and
freezes the model, :mod:`~deepedge.workload.sources` reads time-ordered windows of data,
:mod:`~deepedge.workload.resolve` checks it all (:func:`load_workload`) and
:mod:`~deepedge.workload.bundled` names the workloads deepedge ships.
"""
