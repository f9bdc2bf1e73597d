"""The learned performance model: fitted functions behind the ``PerformanceModel`` Protocol.

Files (one directory per profiled device)::

    models.json            ModelsMetadata: device, memory, provenance, one FunctionReport
                           per function (features, importances, algorithm, held-out MAPE)
    <function>.pkl         the fitted regressor (FLAML estimator wrapper, pickled)

:func:`load_performance_model` reads such a directory, or a directory of them (one per
device). A device that was not profiled is served by the only profiled device when there
is exactly one (a stand-in, logged once), unless ``strict``; otherwise it is a
:class:`NotFoundError`. Only the SIFT app was profiled, so EstExecTime of another app kind
is a :class:`NotFoundError`.

GetMaxBatchSize (Algorithm 1, line 6) evaluates EstState^mem for every batch size in
``[lo, hi]`` and returns the largest ``b`` such that every ``b' <= b`` keeps

    EstState^mem(X, b') * mem_total_mb <= mem_capacity_mb

(0 when ``lo`` does not fit), so a non-monotone regressor never skips an infeasible size.
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from deepedge.cluster.state import NodeState
from deepedge.core.errors import InvalidInputError, NotFoundError
from deepedge.perfmodel import MODELS_SUBDIR
from deepedge.perfmodel.fit_budget import FitBudget
from deepedge.perfmodel.fitting import (
    SPEC_BY_FUNCTION,
    FittedFunction,
    FunctionReport,
    LearnedFunction,
)

log = logging.getLogger(__name__)

METADATA_NAME = "models.json"
PROFILED_APPS = frozenset({"sift"})
_MAX_BATCH_SCAN = 8192


class ModelsMetadata(BaseModel):
    """What ``models.json`` holds."""

    model_config = ConfigDict(frozen=True)

    device: str
    mem_total_mb: float
    has_gpu: bool
    created_utc: str
    time_budget_s: float  # per function: the search's seconds, or with ``trials`` its cap
    seed: int
    versions: dict[str, str]
    provenance: dict[str, Any]
    functions: list[FunctionReport]
    trials: int | None = None  # per target form (None, and older files: counted in seconds)

    def report(self, function: LearnedFunction) -> FunctionReport | None:
        return next((r for r in self.functions if r.function is function), None)


def _file_name(function: LearnedFunction) -> str:
    return function.value.replace("^", "_") + ".pkl"


def _versions() -> dict[str, str]:
    import flaml
    import lightgbm
    import sklearn
    import xgboost

    return {
        "flaml": str(flaml.__version__),
        "lightgbm": str(lightgbm.__version__),
        "xgboost": str(xgboost.__version__),
        "scikit-learn": str(sklearn.__version__),
    }


class DeviceModels:
    """The fitted functions of one profiled device."""

    def __init__(self, metadata: ModelsMetadata, fitted: dict[LearnedFunction, FittedFunction]):
        missing = {
            LearnedFunction.COMPUTE_TIME,
            LearnedFunction.UPDATE_TIME,
            LearnedFunction.STATE_CPU,
            LearnedFunction.STATE_MEM,
            LearnedFunction.EXEC_TIME,
        } - set(fitted)
        if missing:
            names = ", ".join(sorted(m.value for m in missing))
            raise InvalidInputError(f"models of {metadata.device} lack {names}", field="models")
        self.metadata = metadata
        self.fitted = fitted

    @classmethod
    def build(
        cls,
        fitted: Sequence[FittedFunction],
        provenance: dict[str, Any],
        budget: FitBudget,
        seed: int,
    ) -> DeviceModels:
        metadata = ModelsMetadata(
            device=str(provenance["device"]),
            mem_total_mb=float(provenance["mem_total_mb"]),
            has_gpu=any(f.spec.function is LearnedFunction.STATE_GPU for f in fitted),
            created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
            time_budget_s=budget.time_s,
            seed=seed,
            versions=_versions(),
            provenance=provenance,
            functions=[f.report for f in fitted],
            trials=budget.trials,
        )
        return cls(metadata, {f.spec.function: f for f in fitted})

    def save(self, out_dir: Path) -> Path:
        try:
            return self._save(out_dir)
        except OSError as exc:
            raise InvalidInputError(f"cannot write models to {out_dir}: {exc}", "out") from exc

    def _save(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        for function, fitted in self.fitted.items():
            with (out_dir / _file_name(function)).open("wb") as handle:
                pickle.dump(fitted.model, handle, protocol=pickle.HIGHEST_PROTOCOL)
        path = out_dir / METADATA_NAME
        path.write_text(self.metadata.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def load(cls, model_dir: Path) -> DeviceModels:
        meta_path = model_dir / METADATA_NAME
        try:
            metadata = ModelsMetadata.model_validate_json(meta_path.read_text())
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read {meta_path}: {exc.strerror}", field=str(meta_path)
            ) from exc
        except ValueError as exc:
            raise InvalidInputError(f"invalid {meta_path}: {exc}", field=str(meta_path)) from exc
        fitted: dict[LearnedFunction, FittedFunction] = {}
        for report in metadata.functions:
            path = model_dir / _file_name(report.function)
            try:
                with path.open("rb") as handle:
                    model = pickle.load(handle)  # only files this module wrote
            except (OSError, pickle.UnpicklingError, EOFError) as exc:
                raise InvalidInputError(f"cannot load {path}: {exc}", field=str(path)) from exc
            fitted[report.function] = FittedFunction(
                SPEC_BY_FUNCTION[report.function], model, report
            )
        return cls(metadata, fitted)

    def predict(self, function: LearnedFunction, rows: list[dict[str, float]]) -> np.ndarray:
        return self.fitted[function].predict(pd.DataFrame(rows))


def _state_row(prefix: str, state: NodeState) -> dict[str, float]:
    return {
        f"{prefix}_cpu": state.cpu_util,
        f"{prefix}_mem": state.mem_util,
        f"{prefix}_gpu": math.nan if state.gpu_util is None else state.gpu_util,
    }


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, float(value)))


class LearnedPerformanceModel:
    """Implements :class:`deepedge.perfmodel.protocol.PerformanceModel` from fitted models."""

    def __init__(self, devices: dict[str, DeviceModels], strict: bool = False) -> None:
        if not devices:
            raise InvalidInputError("no learned models given", field="models")
        self.devices = devices
        self.strict = strict
        self._warned: set[str] = set()

    def _models(self, device: str) -> DeviceModels:
        found = self.devices.get(str(device))
        if found is not None:
            return found
        if self.strict or len(self.devices) != 1:
            known = ", ".join(sorted(self.devices))
            raise NotFoundError(f"no learned models for device {device!r} (profiled: {known})")
        only = next(iter(self.devices.values()))
        if device not in self._warned:
            self._warned.add(str(device))
            log.warning("device %r uses the models profiled on %r", device, only.metadata.device)
        return only

    def est_compute_time_s(self, device: str, state: NodeState, batch_size: int) -> float:
        row = {**_state_row("init", state), "batch_size": float(batch_size)}
        return float(self._models(device).predict(LearnedFunction.COMPUTE_TIME, [row])[0])

    def est_update_time_s(
        self,
        device: str,
        state: NodeState,
        batch_sizes: Sequence[int],
        ps_state: NodeState,
        n_workers: int,
    ) -> float:
        active = [b for b in batch_sizes if b > 0]
        if not active:
            raise InvalidInputError("the batch distribution has no active worker", "batch_sizes")
        row = {
            **_state_row("init", state),
            **_state_row("ps", ps_state),
            "batch_mean": float(np.mean(active)),
            "n_workers": float(n_workers),
        }
        return float(self._models(device).predict(LearnedFunction.UPDATE_TIME, [row])[0])

    def est_states(
        self, device: str, initial: NodeState, batch_sizes: Sequence[int]
    ) -> list[NodeState]:
        models = self._models(device)
        rows = [{**_state_row("init", initial), "batch_size": float(b)} for b in batch_sizes]
        cpu = models.predict(LearnedFunction.STATE_CPU, rows)
        mem = models.predict(LearnedFunction.STATE_MEM, rows)
        gpu: np.ndarray | None = None
        if initial.gpu_util is not None and LearnedFunction.STATE_GPU in models.fitted:
            gpu = models.predict(LearnedFunction.STATE_GPU, rows)
        return [
            NodeState(
                cpu_util=_clip01(cpu[k]),
                mem_util=_clip01(mem[k]),
                gpu_util=initial.gpu_util if gpu is None else _clip01(gpu[k]),
            )
            for k in range(len(rows))
        ]

    def est_state(self, device: str, initial: NodeState, batch_size: int) -> NodeState:
        return self.est_states(device, initial, [batch_size])[0]

    def est_exec_time_s(self, device: str, app: str, state: NodeState) -> float:
        if str(app) not in PROFILED_APPS:
            raise NotFoundError(f"no learned model for background app {app!r} (profiled: sift)")
        row = _state_row("new", state)
        return float(self._models(device).predict(LearnedFunction.EXEC_TIME, [row])[0])

    def max_batch_size(
        self,
        device: str,
        initial: NodeState,
        mem_capacity_mb: float,
        min_batch: int,
        max_batch: int,
    ) -> int:
        if min_batch < 1 or max_batch < min_batch:
            raise InvalidInputError(
                f"batch bounds must satisfy 1 <= min <= max, got [{min_batch}, {max_batch}]",
                field="batch",
            )
        hi = min(max_batch, min_batch + _MAX_BATCH_SCAN - 1)
        sizes = list(range(min_batch, hi + 1))
        total_mb = self._models(device).metadata.mem_total_mb
        used_mb = np.array([s.mem_util for s in self.est_states(device, initial, sizes)]) * total_mb
        fits = used_mb <= mem_capacity_mb
        if not fits[0]:
            return 0
        first_bad = int(np.argmin(fits)) if not fits.all() else len(sizes)
        return sizes[first_bad - 1]


def load_performance_model(path: Path, strict: bool = False) -> LearnedPerformanceModel:
    """Load ``path/models.json`` (+ pickles), ``path/models/``, or one sub-directory per device."""
    path = Path(path)
    candidates = [path, path / MODELS_SUBDIR]
    for candidate in candidates:
        if (candidate / METADATA_NAME).is_file():
            models = DeviceModels.load(candidate)
            return LearnedPerformanceModel({models.metadata.device: models}, strict)
    if path.is_dir():
        subdirs = sorted(p for p in path.iterdir() if (p / METADATA_NAME).is_file())
        if subdirs:
            loaded = [DeviceModels.load(p) for p in subdirs]
            return LearnedPerformanceModel({m.metadata.device: m for m in loaded}, strict)
    raise InvalidInputError(f"no learned models ({METADATA_NAME}) under {path}", field=str(path))
