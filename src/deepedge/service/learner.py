"""The learner the service runs for deepedge's own job kinds.

``python -m deepedge.service.learner --kind K --document D --results R`` validates the kind's
document with the engine's own model, runs the engine, and writes the decision (or the update
report) to ``R/result.json``. A kind whose engine is not installed is refused at deploy time
with a message naming it (:func:`kind_unavailable_reason`), never faked.

Engines (public entry points):

* ``ekya-window``: ``deepedge.planning.window.window_scheduler("thief").plan(WindowProblem)``; a
  document with a ``workload`` (:class:`EkyaRunSpec`) instead runs the Ekya edge server live
  on the workload's windows (:func:`deepedge.runtime.edge.edge_windows.run_local`: micro-profile,
  plan with Thief, retrain, hot-load) and stores what each window did; one with
  ``train_data`` (:class:`EkyaRetrainSpec`, a deployment's window) runs one such window from
  the control plane's staged data and parent weights and keeps the retrained weights.
* ``placement``: ``deepedge.planning.placement.plan_placement(PlacementProblem)`` (method
  ``auto``)
* ``model-update``: ``deepedge.runtime.training.update.run_model_update(...)`` on the document's
  ``workload`` (:mod:`deepedge.workload`: the user's model, data and labeller; one window,
  :func:`deepedge.runtime.training.workload_update.update_workload`) or, without one, on the bundled
  digits with the edge CNN; the emulated paper testbed unless the document gives a cluster,
  and the Deep-Edge planner on estimates. The update checkpoints its parameter server into
  the job's checkpoint folder and resumes from it after a restart.

Documents are validated at submission (:func:`validate_document`), so a bad one is a 422
naming the field, not a learner that fails later. A ``workload`` is also checked deeply
there (:func:`deep_check`: its model is imported and built, its data read), in the
tenant's sandbox, so the user's code never runs inside the API.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

import deepedge
from deepedge.core.errors import DeepEdgeError, InvalidInputError
from deepedge.service.ekya_jobs import (
    EdgeStreamSpec,
    EdgeWindowSpec,
    EkyaRetrainSpec,
    EkyaRunSpec,
    run_window,
)
from deepedge.service.manifest import JobKind
from deepedge.service.update_executor import LIVE_NEEDS_RAY, ExecutorChoice, resolve_executor
from deepedge.service.workload_ref import WorkloadRef, workload_reference

log = logging.getLogger(__name__)


class ModelUpdateSpec(BaseModel):
    """The document of a ``model-update`` job."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dataset_size: int = Field(
        1000, ge=50, le=100_000, description="digits used for training (<= 1797 bundled ones)"
    )
    epochs: int = Field(
        10, ge=1, le=200, description="epochs at most (the plan's numEpoch and the stop rule's)"
    )
    min_epochs: int | None = Field(
        None, ge=2, le=200,
        description="epochs before the stop rule may end the update (default 3, the first "
        "fit of its curve; a warm start's curve is flat at first); at most epochs",
    )  # fmt: skip
    time_scale: float = Field(0.0, ge=0.0, le=1.0, description="emulated device pacing")
    lr: float | None = Field(
        None, gt=0.0, le=10.0,
        description="the edge CNN's rate (of the equivalent synchronous SGD; default 0.07)",
    )  # fmt: skip
    momentum: float | None = Field(None, ge=0.0, lt=1.0, description="its momentum (0)")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="the rate over the epochs: constant, or a half cosine to 0"
    )
    estimate_noise: float = Field(0.05, ge=0.0, le=1.0)
    seed: int = 0
    cluster: dict[str, Any] | None = Field(None, description="a ClusterSpec; default testbed")
    workload: WorkloadRef | None = Field(
        None,
        description=(
            "the model, data and labeller to update: a workload document (absolute paths), a "
            "bundled workload's name or a workload file on the service host; default: the "
            "bundled digits (dataset_size of them) with the edge CNN"
        ),
    )
    window: int | None = Field(None, ge=0, description="the workload's window (default: last)")
    nodes: list[str] | None = Field(
        None,
        max_length=64,
        description="workers to use: testbed nodes, or with live_cluster the agents' node "
        "ids, every one of which must be alive (default: all of them)",
    )
    train_data: str | None = Field(
        None,
        max_length=256,
        pattern=r"^[A-Za-z0-9_.-]+\.npz$",
        description="an .npz in the job's work folder (x_train, y_train, x_val, y_val): a "
        "deployment's golden-labelled windows (else the bundled digits)",
    )
    initial_weights: str | None = Field(
        None,
        max_length=256,
        pattern=r"^[A-Za-z0-9_.-]+\.(npy|pt)$",
        description="the parent model in the job's work folder: a model file (.pt: a "
        "state_dict or TorchScript, whole) or flat weights (.npy)",
    )
    live_cluster: bool = Field(
        False,
        description="plan from the agents of the service's Ray cluster (docs/CLUSTER.md) "
        "instead of `cluster`: needs a workload, no cluster and time_scale 0",
    )
    ps_node: str | None = Field(
        None, max_length=128, description="live cluster: the node of the PS (default: least loaded)"
    )
    models_root: str | None = Field(
        None,
        max_length=1024,
        pattern=r"^/",
        description="live cluster: learned performance models, one folder per device type "
        "(else the analytic catalog plans)",
    )
    executor: ExecutorChoice = Field(
        ExecutorChoice.AUTO,
        description="where the PS and the workers run: threads of the learner (no Ray to "
        "start; one machine), Ray actors, or auto (threads, Ray with live_cluster)",
    )

    @model_validator(mode="after")
    def _live_cluster_needs_ray(self) -> ModelUpdateSpec:
        if self.live_cluster and self.executor is ExecutorChoice.THREADS:
            raise ValueError(LIVE_NEEDS_RAY)
        return self

    @model_validator(mode="after")
    def _live_cluster_alone(self) -> ModelUpdateSpec:
        if self.live_cluster and (
            (self.workload is None and self.train_data is None)
            or self.cluster is not None
            or self.time_scale != 0
        ):
            raise ValueError(
                "live_cluster needs a workload or train_data, no cluster and time_scale 0"
            )
        return self

    @model_validator(mode="after")
    def _bundled_digits_suffice(self) -> ModelUpdateSpec:
        if self.train_data is None and self.workload is None and self.dataset_size > 1797:
            raise ValueError("dataset_size: the bundled digits are 1797; give train_data")
        return self


def deep_check(
    kind: JobKind,
    document: BaseModel,
    check: Callable[[str | dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """The checks a document's model cannot make (a workload's model and data) with
    ``check``: the service's runs in the tenant's sandbox
    (:func:`deepedge.service.workload_check.sandboxed_checker`), the default in a child
    process of this one. Raises InvalidInputError naming ``workload.<field>``."""
    if isinstance(document, EdgeWindowSpec):
        for stream in document.streams:
            deep_check(kind, stream, check)
        return
    if (
        not isinstance(document, ModelUpdateSpec | EkyaRunSpec | EkyaRetrainSpec | EdgeStreamSpec)
        or document.workload is None
    ):
        return
    from deepedge.workload.check import check_in_subprocess

    try:
        (check or check_in_subprocess)(workload_reference(document))
    except InvalidInputError as exc:
        field = "workload" if exc.field in {None, "workload"} else f"workload.{exc.field}"
        raise InvalidInputError(f"workload: {exc.message}", field=field) from exc


@dataclass(frozen=True)
class Engine:
    module: str
    attribute: str
    document_model: Callable[[], type[BaseModel]]
    run: Callable[[Any, Any], Any]


def _window_problem() -> type[BaseModel]:
    from deepedge.planning.window.documents import WindowProblem

    return WindowProblem


def _placement_problem() -> type[BaseModel]:
    from deepedge.planning.placement.model import PlacementProblem

    return PlacementProblem


def _run_placement(entry: Any, problem: Any) -> Any:
    return entry(problem)


def _checkpoints() -> Path:
    # absolute: the parameter server's Ray actor does not share the learner's working folder
    checkpoints = (
        Path(os.environ.get("DEEPEDGE_CHECKPOINT_DIR", "checkpoints")) / "update"
    ).resolve()
    checkpoints.mkdir(parents=True, exist_ok=True)
    return checkpoints


def report_epoch(event: Any) -> None:
    """An update's finished epoch as one metric sample (``DEEPEDGE_METRICS_FILE``: what
    ``deepedge jobs metrics`` and the dashboard show); other status notes are not metrics."""
    path = os.environ.get("DEEPEDGE_METRICS_FILE")
    data = getattr(event, "data", {})
    if not path or "epoch" not in data or "accuracy" not in data:
        return
    sample = {"epoch": data["epoch"], "accuracy": data["accuracy"],
              "epoch_s": data.get("wall_s"), "at": event.at_s}  # fmt: skip
    with open(path, "a", encoding="utf-8") as metrics:
        metrics.write(json.dumps(sample) + "\n")


def _executor(spec: ModelUpdateSpec) -> Any:
    """The runtime's executor for ``spec`` (:mod:`deepedge.service.update_executor`)."""
    from deepedge.runtime.training.update_config import UpdateExecutor

    return UpdateExecutor(resolve_executor(spec.executor, spec.live_cluster))


_LOADED_AT = time.time()


def _process_started_at() -> float:
    """When this process was created (wall clock): the start of the job's ``start`` phase.

    Its age is read against the boot clock (``starttime`` of ``/proc/self/stat``, in clock
    ticks since boot): ``psutil``'s creation time adds the boot time, which the kernel
    gives in whole seconds, and would be off by up to one second."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the name
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):  # no procfs: the learner's own import
        return _LOADED_AT
    return time.time() - age_s


def timed_summary(result: Any, update_called_at: float, write_s: float) -> dict[str, Any]:
    """Which executor ran the update, and the seconds of the job's phases (what
    :func:`deepedge.controlplane.update_jobs.update_phases` reads): ``start`` (the process
    created -> training ready: interpreter, imports, document, data, model, the executor's
    runtime (Ray's start: ``runtime_start_s``) and every launch's start), ``plan``,
    ``train`` (every launch's epochs) and ``write`` (the model file and this summary; the
    result file's own write is after it). ``result`` is an ``UpdateResult``."""
    phases = result.phases
    start_s = update_called_at - _process_started_at() + phases.runtime_s + phases.launch_s
    return {
        "executor": result.executor.value,
        "phases_s": {"start": start_s, "plan": phases.plan_s, "train": phases.train_s,
                     "write": write_s},
        "runtime_start_s": phases.runtime_s,
    }  # fmt: skip


def _run_workload_update(spec: ModelUpdateSpec) -> Any:
    from deepedge.planning.sharding.spec import ClusterSpec
    from deepedge.runtime.training.testbed import paper_testbed
    from deepedge.runtime.training.workload_update import training_config, update_workload
    from deepedge.workload.resolve import load_workload

    workload = load_workload(workload_reference(spec))
    live = None
    if spec.live_cluster:  # the service's RAY_ADDRESS: the cluster comes from its agents
        from deepedge.runtime.cluster.live_cluster import LiveCluster
        from deepedge.runtime.cluster.session import ensure_ray

        ensure_ray()
        live = LiveCluster(ps_node=spec.ps_node, workers=spec.nodes)
    # dataset_size is replaced by the window's training size
    cluster = (
        ClusterSpec.model_validate({**spec.cluster, "dataset_size": 1})
        if spec.cluster is not None
        else None
        if live is not None
        else paper_testbed(1, spec.epochs)
    )
    config = training_config(
        workload, max_epochs=spec.epochs, time_scale=spec.time_scale, seed=spec.seed
    )
    called_at = time.time()
    update = update_workload(
        workload,
        cluster,
        _checkpoints(),
        window=spec.window,
        config=replace(config, executor=_executor(spec)),
        estimate_noise=spec.estimate_noise,
        on_event=report_epoch,
        resume=True,
        live=live,
        models_root=_models_root(spec),
    )
    written = time.perf_counter()
    summary = update.summary(workload)
    return {**summary, **timed_summary(update.result, called_at, time.perf_counter() - written)}


def _run_update(entry: Any, spec: ModelUpdateSpec) -> Any:
    """A workload's own window (:func:`_run_workload_update`); else the staged data (a
    deployment's windows; its model the workload's when one is given, else the edge CNN) or
    the bundled digits."""
    if spec.workload is not None and spec.train_data is None:
        return _run_workload_update(spec)
    import numpy as np

    from deepedge.learning.convergence import StoppingRule
    from deepedge.learning.model_state import buffer_arrays, load_model_file, save_model_file
    from deepedge.learning.models import get_flat_weights, make_edge_model
    from deepedge.planning.sharding.spec import ClusterSpec
    from deepedge.runtime.training.testbed import deep_edge_planner, paper_testbed
    from deepedge.runtime.training.update import UpdateConfig
    from deepedge.runtime.training.update_config import LrSchedule

    if spec.train_data is not None:
        with np.load(spec.train_data) as staged:
            train_set = (staged["x_train"], staged["y_train"])
            held_out_set = (staged["x_val"], staged["y_val"])
    else:
        from deepedge.learning.stream import load_digits_images

        data = load_digits_images()
        order = np.random.default_rng(spec.seed).permutation(len(data.labels))
        train, held_out = order[: spec.dataset_size], order[spec.dataset_size :]
        train_set = (data.images[train], data.labels[train])
        held_out_set = (data.images[held_out], data.labels[held_out])
    if len(train_set[1]) != spec.dataset_size:
        raise ValueError(f"dataset_size {spec.dataset_size} != {len(train_set[1])} staged samples")
    # epochs is Deep-Edge's numEpoch: the planner's and the stop rule's upper bound alike
    stopping = StoppingRule(max_epochs=spec.epochs)
    if spec.min_epochs is not None:
        stopping = replace(stopping, min_epochs=max(2, min(spec.min_epochs, spec.epochs)))
    config = UpdateConfig(time_scale=spec.time_scale, seed=spec.seed, stopping=stopping,
                          lr_schedule=LrSchedule(spec.lr_schedule))  # fmt: skip
    if spec.lr is not None:
        config = replace(config, lr=spec.lr)
    if spec.momentum is not None:
        config = replace(config, momentum=spec.momentum)
    if spec.workload is not None:
        from deepedge.runtime.training.workload_update import training_config
        from deepedge.workload.resolve import load_workload

        workload = load_workload(workload_reference(spec))
        make: Callable[[], Any] = workload.model_factory
        config = training_config(
            workload, max_epochs=spec.epochs, time_scale=spec.time_scale, seed=spec.seed
        )
    else:
        image_size = int(train_set[0].shape[-1])
        make = lambda: make_edge_model(10, image_size, seed=spec.seed)  # noqa: E731
    config = replace(config, executor=_executor(spec))
    parent = make()  # the parent's whole model (parameters and buffers), else the factory's
    if spec.initial_weights is not None:
        load_model_file(parent, Path(spec.initial_weights))
    live = None
    planned_on: list[str] = []
    planner = deep_edge_planner(spec.estimate_noise, spec.seed)
    if spec.live_cluster:  # the deployment's nodes, as the agents report them now
        from deepedge.runtime.cluster.live_cluster import live_planner

        live, cluster = _live_nodes(spec)
        planner = live_planner(_models_root(spec), on_choice=planned_on.append)
    elif spec.cluster is not None:
        cluster = ClusterSpec.model_validate({**spec.cluster, "dataset_size": spec.dataset_size})
    else:
        cluster = paper_testbed(spec.dataset_size, spec.epochs)
        if spec.nodes is not None:
            workers = [w for w in cluster.workers if w.id in set(spec.nodes)]
            if not workers:
                raise ValueError(f"none of the nodes {spec.nodes} is a testbed worker")
            cluster = cluster.model_copy(update={"workers": workers})
    called_at = time.time()
    result = entry(
        cluster,
        train_set,
        held_out_set,
        make,
        get_flat_weights(parent),
        _checkpoints(),
        planner=planner,
        config=config,
        resume=True,
        initial_buffers=buffer_arrays(parent),
        on_event=report_epoch,
        live=live,
    )
    written = time.perf_counter()
    results = Path(os.environ.get("DEEPEDGE_RESULTS_DIR", "results"))
    save_model_file(result.model(make), results / "model.pt")  # whole: weights and buffers
    summary = {
        "final_accuracy": result.final_accuracy,
        "accuracies": list(result.accuracies),
        "stop_reason": result.stop_reason.value,
        "restarts": result.restarts,
        "excluded": list(result.excluded),
        "plan": result.plan.model_dump(mode="json"),
    }
    if live is not None:
        summary.update(_live_placement(live, result, planned_on))
    return {**summary, **timed_summary(result, called_at, time.perf_counter() - written)}


def _models_root(spec: ModelUpdateSpec) -> Path | None:
    return None if spec.models_root is None else Path(spec.models_root)


def _live_nodes(spec: ModelUpdateSpec) -> tuple[Any, Any]:
    """The live cluster of the service's RAY_ADDRESS restricted to ``spec.nodes`` (every
    one of them must be an alive agent: a node that is not there fails the job naming it,
    never a plan on fewer nodes), and its ClusterSpec."""
    from deepedge.runtime.cluster.live_cluster import LiveCluster
    from deepedge.runtime.cluster.session import ensure_ray

    ensure_ray()
    live = LiveCluster(ps_node=spec.ps_node, workers=spec.nodes)
    named = [*(spec.nodes or []), *([spec.ps_node] if spec.ps_node else [])]
    live.wait_for(named, timeout_s=2 * live.lost_after_s + 1.0)
    return live, live.spec(spec.dataset_size, spec.epochs)


def _live_placement(live: Any, result: Any, planned_on: list[str]) -> dict[str, Any]:
    """Where the update ran, by Ray's actor table mapped to the agents' node ids; a worker
    that ran anywhere but on its own node fails the job (the decision would be false)."""
    from deepedge.core.errors import RunFailedError
    from deepedge.runtime.cluster.live_cluster import misplaced, nodes_of_placements
    from deepedge.runtime.training.monitor import PARAMETER_SERVER_ID

    launches = nodes_of_placements(result.placements, live.views())
    last = launches[-1] if launches else {}
    wrong = misplaced(last, PARAMETER_SERVER_ID)
    if wrong:
        raise RunFailedError(f"the update ran off its plan: {'; '.join(wrong)}",
                             cause="a worker was not pinned to its node")  # fmt: skip
    return {
        "live": True,
        "planned_on": planned_on[-1] if planned_on else None,
        "ps_node": last.get(PARAMETER_SERVER_ID),
        "workers_ran_on": {m: n for m, n in last.items() if m != PARAMETER_SERVER_ID},
        "placements": launches,
        "ray_placements": [dict(p) for p in result.placements],
    }


ENGINES: dict[JobKind, Engine] = {
    JobKind.EKYA_WINDOW: Engine(
        "deepedge.planning.window", "window_scheduler", _window_problem, run_window
    ),
    JobKind.PLACEMENT: Engine(
        "deepedge.planning.placement", "plan_placement", _placement_problem, _run_placement
    ),
    JobKind.MODEL_UPDATE: Engine(
        "deepedge.runtime.training.update", "run_model_update", lambda: ModelUpdateSpec, _run_update
    ),
}


def validate_document(kind: JobKind, document: dict[str, Any]) -> Any:
    """Validate a kind's document with its engine's model (pydantic ValidationError if bad);
    an ``ekya-window`` document with ``edge_server`` is an :class:`EdgeWindowSpec` (an edge
    server's window over its deployments), one with ``train_data`` an
    :class:`EkyaRetrainSpec` (one deployment's window), else one with a ``workload`` an
    :class:`EkyaRunSpec`."""
    if kind is JobKind.EKYA_WINDOW and isinstance(document, dict) and "edge_server" in document:
        return EdgeWindowSpec.model_validate(document)
    if kind is JobKind.EKYA_WINDOW and isinstance(document, dict) and "train_data" in document:
        return EkyaRetrainSpec.model_validate(document)
    if kind is JobKind.EKYA_WINDOW and isinstance(document, dict) and "workload" in document:
        return EkyaRunSpec.model_validate(document)
    return ENGINES[kind].document_model().model_validate(document)


def kind_unavailable_reason(kind: JobKind, deep: bool = False) -> str | None:
    """None when the kind can run here, else a message naming what is missing.

    The service only checks that the engine's module is installed (importing it would pull
    Ray and torch into the API process); the learner (``deep=True``) also imports it.
    """
    if kind is JobKind.COMMAND:
        return None
    engine = ENGINES[kind]
    # Look for the module's file without importing anything (its package may import Ray).
    where = Path(deepedge.__file__).parent.joinpath(*engine.module.split(".")[1:])
    if not (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()):
        return (
            f"job kind {kind.value!r} is unavailable: its engine {engine.module} is not installed"
        )
    if not deep:
        return None
    try:
        module = importlib.import_module(engine.module)
    except Exception as exc:
        return f"job kind {kind.value!r} is unavailable: importing {engine.module} failed: {exc}"
    if not hasattr(module, engine.attribute):
        return f"job kind {kind.value!r} is unavailable: {engine.module} has no {engine.attribute}"
    return None


def learner_argv(kind: JobKind, document: Path, results: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "deepedge.service.learner",
        "--kind",
        kind.value,
        "--document",
        str(document),
        "--results",
        str(results),
    ]


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deepedge-learner")
    parser.add_argument("--kind", required=True, choices=[k.value for k in ENGINES])
    parser.add_argument("--document", required=True, type=Path)
    parser.add_argument("--results", required=True, type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # Ray's start-up messages go to debug.log in the work folder, not into the job's log.
    os.environ.setdefault("DEEPEDGE_DEBUG_LOG", str(Path("debug.log").absolute()))
    kind = JobKind(args.kind)
    reason = kind_unavailable_reason(kind, deep=True)
    if reason is not None:
        log.error("%s", reason)
        return 3
    engine = ENGINES[kind]
    entry = getattr(importlib.import_module(engine.module), engine.attribute)
    document = validate_document(kind, json.loads(args.document.read_text()))
    try:
        result = engine.run(entry, document)
    except DeepEdgeError as exc:  # a typed failure: one line and its exit code
        log.error("%s", exc.message)
        return exc.exit_code
    args.results.mkdir(parents=True, exist_ok=True)
    out = args.results / "result.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(_jsonable(result), indent=2, default=str))
    os.replace(tmp, out)
    log.info("%s finished; result in %s", kind.value, out)
    return 0


def leave(code: int) -> NoReturn:
    """Exit with ``code``. A learner that started no Ray skips the interpreter's
    finalization, which tears down torch's modules one by one (0.3-0.6 s of CPU on a quiet
    2-core host, seconds at a niced job's share of a loaded one), all of it between the
    result written and the job's exit; its files are closed and its streams flushed
    first. With Ray imported the normal exit runs: Ray's exit handlers stop its embedded
    cluster."""
    if "ray" in sys.modules:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
