"""A synthetic profile with known structure, for testing the fitting machinery quickly.

The real pipeline (stressors, SIFT, update task) is exercised by the profiling tests and
the quick benchmark; here the ground truth is a formula, so accuracy claims are checkable.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from deepedge.profiling.dataset import COLUMN_NAMES, ProfileDataset, Provenance

MEM_TOTAL_MB = 16384.0
DEVICE = "synthetic-host"


def synthetic_frame(n_configs: int = 60, repeats: int = 2, noise: float = 0.02, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for config in range(n_configs):
        cpu = float(rng.uniform(0.05, 0.9))
        mem = float(rng.uniform(0.2, 0.6))
        b = int(rng.choice([8, 16, 32, 64, 128, 256]))
        workers = int(rng.integers(1, 5))
        batch_mean = float(rng.choice([8, 16, 32, 64, 128]))
        for repeat in range(repeats):
            wobble = lambda: 1.0 + noise * rng.standard_normal()  # noqa: E731
            init_cpu = min(1.0, cpu + 0.01 * rng.standard_normal())
            t_compute = (2e-4 + 4e-3 / b) * (1.0 + 1.5 * init_cpu**2) * wobble()
            t_update = 1e-3 * (1 + 0.4 * (workers - 1)) * (1 + 0.5 * init_cpu) * wobble()
            new_cpu = min(1.0, init_cpu + 0.5 * (1 - init_cpu))
            new_mem = mem + (300.0 + 2.0 * b) / MEM_TOTAL_MB
            exec_s = 0.09 / (1 - 0.6 * new_cpu) * wobble()
            rows.append(
                {
                    "device": DEVICE, "config_id": config, "repeat": repeat,
                    "stress_cpu": cpu, "stress_mem_mb": 0, "stress_io": 0, "stress_gpu": 0.0,
                    "batch_size": b, "n_workers": workers, "batch_mean": batch_mean,
                    "init_cpu": init_cpu, "init_mem": mem, "init_gpu": np.nan,
                    "new_cpu": new_cpu, "new_mem": new_mem, "new_gpu": np.nan,
                    "ps_cpu": init_cpu, "ps_mem": mem, "ps_gpu": np.nan,
                    "t_compute_s": t_compute, "t_update_s": t_update,
                    "t_update_server_s": 1e-5, "n_steps": 20,
                    "exec_time_s": exec_s, "exec_mean_s": exec_s, "exec_p95_s": exec_s * 1.1,
                    "n_frames": 7, "miss_frac": 0.0, "t_offset_s": float(config),
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMN_NAMES))


def synthetic_provenance() -> Provenance:
    return Provenance(
        device=DEVICE, host="test", cores=2, mem_total_mb=MEM_TOTAL_MB, cpu_model="x86_64",
        gpu_name=None, started_utc="2026-11-22T00:00:00+00:00",
        finished_utc="2026-11-22T00:01:00+00:00", duration_s=60.0, backend="stress-ng",
        versions={"python": "3.11"}, workload="synthetic", n_params=7000, sweep={},
    )  # fmt: skip


def synthetic_dataset(**kwargs) -> ProfileDataset:
    return ProfileDataset(synthetic_frame(**kwargs), synthetic_provenance())
