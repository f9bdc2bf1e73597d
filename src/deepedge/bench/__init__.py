"""Benchmarks that reproduce the papers' results: ``python -m deepedge.bench.NAME``."""
