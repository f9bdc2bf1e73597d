"""Profiling on real processes: stressors, the SIFT background app, the model-update task
against a loopback parameter server, and the sweep that turns them into a dataset.

Layering: profiling uses cluster/ (node states) and core/ only; the model it trains is
injected (:class:`deepedge.profiling.profiler.Workload`), so it imports neither learning/
nor runtime/ (no Ray). Every child process runs in its own session with a parent-death
signal and is stopped by the context manager that started it.
"""
