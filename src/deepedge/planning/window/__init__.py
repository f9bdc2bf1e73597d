"""Ekya's retraining window: which streams to retrain, with which configuration and what GPU
share (the thief, the uniform baseline, the exact oracle), EstimateAccuracy, GPU packing,
configuration pruning and the online calibration of the micro-profiler's estimates."""
