"""What every benchmark prints: the closing ``RESULT key=value ...`` line and the machine it
ran on. Tables and number formatting are the CLI's (:mod:`deepedge.cli.render`); they are
re-exported here for the benchmarks."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from deepedge.cli.render import format_value, table

__all__ = ["format_value", "machine_description", "result_line", "table"]


def result_line(values: Mapping[str, float | int | str | bool]) -> str:
    """The last line every benchmark prints: ``RESULT k1=v1 k2=v2 ...`` in the given order."""
    return "RESULT " + " ".join(f"{k}={format_value(v)}" for k, v in values.items())


def machine_description() -> str:
    """Cores, CPU model and GPU (or none), for BENCHMARKS.md entries."""
    gpu = "no GPU"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # torch absent or broken: report no GPU
        pass
    return f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, {gpu}"
