"""Torch models, drifting data streams, training loops, curve fitting, micro-profiling."""
