"""Trace-driven simulators; they drive the planners of :mod:`deepedge.planning` unchanged."""
