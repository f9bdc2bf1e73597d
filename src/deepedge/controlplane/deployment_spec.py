"""The deployment document (``deepedge deploy FILE.yaml``): one model served at the site.

A deployment names its workload (the site's drifting ``digits`` stream, or any workload of
:mod:`deepedge.workload`: a bundled name, a workload file on the service host or an inline
workload document with absolute paths), where it is served (emulated nodes of the testbed,
or an edge server), how the served accuracy is measured (a golden labeller on a sample of
every window), when to update (accuracy drop, schedule, sample count, on request), how to
update (a Deep-Edge
``model-update`` job across the nodes, or, on an edge server, an Ekya ``ekya-window`` job
whose Thief scheduler chooses the retraining configuration and the GPU shares of inference
and retraining in the window) and how a new version reaches traffic (accuracy gate
on held-out golden-labelled data, then a canary on a share of the traffic, then everyone;
automatic rollback when the served version scores below the one it replaced).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deepedge.cluster.devices import DeviceType
from deepedge.service.update_executor import LIVE_NEEDS_RAY, ExecutorChoice

SITE_DIGITS = "digits"  # the site's drifting digits stream and its edge CNN
WORKLOAD_FILE_SUFFIXES = (".json", ".yaml", ".yml")
MIN_UPDATE_SAMPLES, MAX_UPDATE_SAMPLES = 50, 100_000  # a model-update job's dataset_size
# an update's (epochs, min_epochs) by default: the site's edge CNN (False), a user's workload
# (True; its own training section sets the rest of how it trains)
UPDATE_EPOCHS = {False: (30, 30), True: (10, 10)}
TESTBED_NODES = ("tx2-1", "nano-1", "nano-2", "nano-3")
EDGE_SERVERS = ("edge-1", "edge-2")


@dataclass(frozen=True)
class SiteNode:
    """A node of the emulated site (the paper testbed of ``runtime/training/testbed.py``): its
    device and the utilisation of its fixed background scenario (emulated, not measured)."""

    name: str
    device: str
    role: str
    cpu_util: float
    gpu_util: float
    mem_util: float


SITE_NODES = (
    SiteNode("tx2-1", "jetson-tx2", "worker", 0.20, 0.10, 0.30),
    SiteNode("nano-1", "jetson-nano", "worker", 0.20, 0.10, 0.35),
    SiteNode("nano-2", "jetson-nano", "worker", 0.30, 0.66, 0.40),
    SiteNode("nano-3", "jetson-nano", "worker", 0.60, 0.88, 0.45),
    SiteNode("pi4-ps", "raspberry-pi-4", "parameter-server", 0.20, 0.0, 0.30),
    SiteNode("edge-1", "edge-gpu-server", "edge-server", 0.10, 0.0, 0.20),
    SiteNode("edge-2", "edge-gpu-server", "edge-server", 0.10, 0.0, 0.20),
)


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TargetKind(enum.StrEnum):
    NODES = "nodes"
    EDGE_SERVER = "edge-server"


class NodeSelector(_Doc):
    """Which live nodes a deployment takes (``target.live``): every alive agent of the
    service's cluster whose device type is ``device_type`` (when given) and whose Ray node
    carries every one of ``labels`` (``ray start --labels``)."""

    device_type: DeviceType | None = None
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)


class Target(_Doc):
    """Where the model is served: emulated testbed nodes (Deep-Edge), the agents of the
    service's Ray cluster (``live``: node ids, or a selector, checked against the node
    registry when the deployment is created; :mod:`deepedge.controlplane.live_nodes`) or an
    edge server (Ekya; its ``gpus`` are shared by the inference and the retraining of each
    window, CPU cores on a host without a GPU). A live edge server is one agent of the
    cluster (named, or the one agent a selector matches); its ``gpus`` are that node's own
    (its GPUs, else its CPU cores), read from the registry. ``nodes`` always holds the node
    ids: a live target's selector is resolved into them when the deployment is created, and
    a live ``nodes`` target given by selector (or by neither: every agent) follows it: each
    update trains on the agents it matches when the update starts (``follows_selector``)."""

    kind: TargetKind = TargetKind.NODES
    live: bool = Field(
        False,
        description="the nodes are agents of the service's Ray cluster (deepedge serve "
        "--ray-address; docs/CLUSTER.md), not the emulated testbed",
    )
    nodes: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="testbed nodes (default: all four), live agents' node ids (default: the "
        "selector's, else every alive agent), or the edge server (default: edge-1; live: "
        "one agent's node id, or the one agent the selector matches)",
    )
    selector: NodeSelector | None = Field(
        None, description="live only: the agents to take, by device type and labels"
    )
    follows_selector: bool = Field(
        False,
        description="set by the service when it resolves a live nodes target given without "
        "nodes: each update takes the alive agents the selector (else every agent) matches "
        "then, not only those of creation",
    )
    gpus: float = Field(
        1,
        gt=0,
        le=64,
        description="edge-server GPUs, CPU cores on a server without a GPU (edge-server only; "
        "live: set from the node's own resources when the deployment is created)",
    )
    inference_gpus: float = Field(
        0.4,
        gt=0,
        le=64,
        description="edge-server GPUs the model's inference takes at the full frame rate "
        "(Ekya's D_v; edge-server only)",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_nodes(cls, value: Any) -> Any:
        if isinstance(value, dict) and not value.get("nodes") and not value.get("live"):
            edge = value.get("kind", TargetKind.NODES) == TargetKind.EDGE_SERVER
            return {**value, "nodes": [EDGE_SERVERS[0]] if edge else list(TESTBED_NODES)}
        return value

    @model_validator(mode="after")
    def _known_nodes(self) -> Target:
        if self.selector is not None and not self.live:
            raise ValueError("a selector picks live nodes: give target.live: true")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes must be distinct")
        edge = self.kind is TargetKind.EDGE_SERVER
        if self.live and edge and (len(self.nodes) > 1 or not (self.nodes or self.selector)):
            raise ValueError(
                "a live edge-server target is one agent of the cluster: give target.nodes: "
                "[NODE_ID] (deepedge agent's node id) or a target.selector that matches one"
            )
        if self.live:  # checked against the registry by the service (live_nodes)
            return self
        known = EDGE_SERVERS if self.kind is TargetKind.EDGE_SERVER else TESTBED_NODES
        unknown = sorted(set(self.nodes) - set(known))
        if unknown:
            raise ValueError(
                f"unknown {self.kind} node(s) {', '.join(unknown)}; the emulated site has "
                f"{', '.join(known)}"
            )
        if self.kind is TargetKind.EDGE_SERVER and len(self.nodes) != 1:
            raise ValueError("an edge-server target is one edge server")
        return self


class Labeller(enum.StrEnum):
    GOLDEN_MODEL = "golden-model"  # the golden CNN ensemble labels the sample (the demo's)
    GROUND_TRUTH = "ground-truth"  # the stream's own labels: a perfect (human) labeller


class TriggerSpec(_Doc):
    accuracy_threshold: float = Field(
        0.8, ge=0.0, le=1.0,
        description="an update starts while served accuracy is below it (0: never on accuracy)",
    )  # fmt: skip
    recovery_margin: float = Field(
        0.03, ge=0.0, le=1.0,
        description="an update also starts while served accuracy is below the level before "
        "the drift less this margin (so the site gets back where it was)",
    )  # fmt: skip
    period_windows: int | None = Field(None, ge=1, description="scheduled update every N")
    sample_count: int | None = Field(
        300, ge=1,
        description="update once this many labelled samples arrived since the last update "
        "(the site keeps learning from its traffic; the gate keeps only a better version; "
        "null: never on a count)",
    )  # fmt: skip
    cooldown_windows: int = Field(1, ge=0, le=1000)


class UpdatePolicy(enum.StrEnum):
    MODEL_UPDATE = "model-update"
    EKYA_WINDOW = "ekya-window"


class UpdateResources(_Doc):
    """What one update's learner asks for (its job's ``resources``). ``mem_mb`` is the
    learner's address-space limit and, where learners run on Ray, its ``memory`` request;
    a learner that joins Ray maps its node's object store into that address space, so on a
    live cluster ``mem_mb`` must exceed the object store (checked when the deployment is
    created and when each update is submitted; :mod:`deepedge.controlplane.update_resources`).
    Without ``mem_mb`` it is derived from the workload's data and the object store."""

    cpus: float = Field(1.0, gt=0, le=256)
    gpus: int = Field(0, ge=0, le=64)
    mem_mb: int | None = Field(
        None,
        ge=256,
        le=1_048_576,
        description="the learner's address-space limit, MiB (also its Ray memory request); "
        "default: derived from the training data and Ray's object store",
    )


class UpdateSpec(_Doc):
    policy: UpdatePolicy = UpdatePolicy.MODEL_UPDATE
    resources: UpdateResources = Field(default_factory=UpdateResources)
    ps_node: str | None = Field(
        None,
        max_length=128,
        description="live target: the node of the parameter server (default: the least "
        "loaded alive node)",
    )
    models_dir: str | None = Field(
        None,
        max_length=1024,
        pattern=r"^/",
        description="live target: learned performance models, one folder per device type "
        "(deepedge perfmodels fit), on the service host; the plan uses them where they cover "
        "every worker's device type, else the analytic catalog",
    )
    epochs: int | None = Field(
        None,
        ge=1,
        le=100,
        description="epochs an update trains at most (its stop rule ends it sooner once "
        "the fitted curve flattens); default 30 for the site's edge CNN, whose updates learn "
        "from a few hundred to a few thousand live labels, which take more passes than a "
        "data set (on the digits' abrupt drift: 0.959 after 10 epochs of 1,870 labels, 0.974 "
        "after 30), and 10 for a user's workload",
    )
    min_epochs: int | None = Field(
        None, ge=2, le=100,
        description="epochs an update trains before its stop rule may end it (at most "
        "`epochs`): an update starts from the serving version, whose accuracy curve is flat "
        "for its first epochs although the new data still teaches it, and a half cosine "
        "stopped two thirds down its rate learns less (0.942 against 0.948 for all 30 "
        "epochs, on a recovery's 673 labels); by default all of `epochs` (the site's edge "
        "CNN trains 30 epochs of a few hundred labels in about a second)",
    )  # fmt: skip
    learning_rate: float = Field(
        0.2, gt=0.0, le=10.0,
        description="the site's edge CNN: an update's rate, of the equivalent synchronous "
        "SGD; its parameter server pushes at this rate and adds only the momentum the "
        "asynchrony of its workers does not supply",
    )  # fmt: skip
    momentum: float = Field(
        0.0, ge=0.0, lt=1.0,
        description="and its momentum (the edge CNN's updates were tuned at 0.2 without "
        "momentum on two or more workers)",
    )  # fmt: skip
    lr_schedule: Literal["constant", "cosine"] = Field(
        "cosine", description="the rate over an update's epochs: constant, or a half "
        "cosine from learning_rate to 0 over `epochs` (the stop rule may end it sooner)",
    )  # fmt: skip
    executor: ExecutorChoice = Field(
        ExecutorChoice.AUTO,
        description="model-update: where an update's PS and workers run: threads of the job's "
        "learner (no Ray to start), Ray actors, or auto (threads, Ray for a live target)",
    )
    recent_windows: int = Field(
        8, ge=1, le=20,
        description="windows an update not caused by a drift trains on at least (a drift's "
        "update trains on the windows since the drift began)",
    )  # fmt: skip
    label_fraction: float = Field(
        0.1, gt=0.0, le=1.0,
        description="share of a window's samples golden-labelled while the site does not "
        "recover (with the default sample_fraction, 10 % of the requests served): the "
        "budget a recovery's labels leave",
    )  # fmt: skip
    recovery_label_fraction: float = Field(
        0.5, gt=0.0, le=1.0,
        description="share of a window's samples golden-labelled while the site recovers "
        "(an update or a canary under way, or served accuracy below the trigger's "
        "threshold; with the default sample_fraction, half the requests served, half of "
        "those the least sure): the labels a drift's updates learn from come in faster; "
        "never less than label_fraction",
    )  # fmt: skip
    hard_fraction: float = Field(
        0.5, ge=0.0, lt=1.0,
        description="share of those labels given to the answers the serving version was "
        "least sure of (they teach most); the rest are a uniform draw, which every decision "
        "is made on",
    )  # fmt: skip
    validation_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    time_scale: float = Field(0.0, ge=0.0, le=1.0, description="emulated device pacing")

    def epoch_bounds(self, user_workload: bool) -> tuple[int, int]:
        """(``epochs``, ``min_epochs``) of an update, the defaults filled in for the site's
        edge CNN or a user's workload (:data:`UPDATE_EPOCHS`), ``min_epochs`` at most
        ``epochs``."""
        most, least = UPDATE_EPOCHS[user_workload]
        epochs = most if self.epochs is None else self.epochs
        first = least if self.min_epochs is None else self.min_epochs
        return epochs, max(2, min(first, epochs))
    retraining_window_s: float = Field(
        30.0,
        gt=0.0,
        le=86_400.0,
        description="ekya-window: the retraining window (edge-server seconds) the Thief "
        "scheduler plans inference and retraining in",
    )


class CanarySpec(_Doc):
    fraction: float = Field(0.25, gt=0.0, lt=1.0, description="share of traffic and nodes")
    windows: int = Field(1, ge=0, le=100, description="canary windows; 0 promotes at once")
    max_windows: int = Field(
        12, ge=1, le=1000,
        description="an undecided canary's last window: promoted then if its share held the "
        "gate's min_samples without a sign of harm, else rolled back",
    )  # fmt: skip
    during_recovery: bool = Field(
        False,
        description="a recovery's update (an accuracy drop's or a follow-up's) that its gate "
        "showed better goes to a canary too; by default it serves at once: while the site "
        "recovers each window costs more than a canary guards against, and the rollback "
        "watch still guards it (one its gate leaves undecided always goes to a canary)",
    )  # fmt: skip


class GateSpec(_Doc):
    """Every decision compares versions on the same golden-labelled samples; it needs
    ``min_samples`` of them and a ``confidence`` interval of the difference that clears its
    margin (gate: above ``min_gain``; canary: above ``-rollback_tolerance``; rollback:
    below 0), else it is undecided and says so."""

    min_gain: float = Field(0.0, ge=-1.0, le=1.0, description="candidate - parent, held out")
    rollback_tolerance: float = Field(0.02, ge=0.0, le=1.0)
    confidence: float = Field(
        0.95, ge=0.5, le=0.9999, description="of the intervals every decision is made on"
    )
    min_samples: int = Field(
        20, ge=5, le=1_000_000, description="labelled samples a decision needs at least"
    )


class RetentionSpec(_Doc):
    """How much sampled traffic the site's sample store keeps for the deployment; the oldest
    samples are evicted first when any bound is passed."""

    max_samples: int = Field(20_000, ge=100, le=10_000_000)
    max_mb: float = Field(512.0, gt=0.0, le=1_000_000.0, description="stored inputs, MiB")
    max_age_h: float = Field(168.0, gt=0.0, le=87_600.0, description="hours")


class ServingSpec(_Doc):
    """How the data plane serves the deployment (Ray Serve replicas behind the Open
    Inference Protocol endpoint ``/v2/models/<tenant>.<name>``) and how much of its traffic
    is sampled into the site's sample store to learn from."""

    replicas: int = Field(1, ge=1, le=64)
    cpus: float = Field(
        1.0, gt=0.0, le=256.0, description="CPU share per replica (also its torch threads)"
    )
    gpus: float = Field(0.0, ge=0.0, le=8.0, description="GPU share per replica")
    max_batch_size: int = Field(32, ge=1, le=1024, description="images per dynamic batch")
    batch_wait_ms: float = Field(5.0, ge=0.0, le=1000.0, description="a batch's longest wait")
    sample_fraction: float = Field(
        1.0, ge=0.0, le=1.0,
        description="share of served requests kept to learn from (the least sure of them "
        "are labelled first: a larger pool gives the label budget better picks)",
    )  # fmt: skip
    retention: RetentionSpec = Field(default_factory=RetentionSpec)


class StreamSpec(_Doc):
    """The site's drifting digits (seeded drift): its first windows train the first
    version offline, and ``deepedge camera`` sends its windows as live requests."""

    seed: int = Field(0, ge=0, le=2**31)
    window_size: int = Field(200, ge=20, le=5000)
    onset_window: int = Field(3, ge=0, le=10_000)
    ramp_windows: int = Field(2, ge=1, le=10_000)


class DeploymentSpec(_Doc):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    workload: str | dict[str, Any] = Field(
        SITE_DIGITS,
        description="digits (the site's drifting digits stream), a bundled workload's name, "
        "a workload file (.json/.yaml) on the service host, or an inline workload document "
        "(docs/schemas/workload.schema.json; absolute paths)",
    )
    target: Target = Field(default_factory=Target)
    labeller: Labeller = Labeller.GOLDEN_MODEL
    trigger: TriggerSpec = Field(default_factory=TriggerSpec)
    update: UpdateSpec = Field(default_factory=UpdateSpec)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    gate: GateSpec = Field(default_factory=GateSpec)
    stream: StreamSpec = Field(default_factory=StreamSpec)
    window_s: float = Field(2.0, ge=0.05, le=86_400, description="seconds per stream window")
    base_windows: int = Field(2, ge=1, le=20, description="windows the first version learns")
    base_epochs: int = Field(
        8,
        ge=0,
        le=100,
        description="epochs the first version trains; 0: the model as its factory (and a "
        "workload's training.warm_start) gives it",
    )
    serving: ServingSpec = Field(default_factory=ServingSpec)
    placement: dict[str, Any] | None = Field(
        None,
        description="an MVSP placement problem (the model's variants on the site's nodes), "
        "solved by a placement job when the deployment starts; its decision is recorded",
    )

    @field_validator("placement")
    @classmethod
    def _placement_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return value
        from pydantic import ValidationError

        from deepedge.core.errors import describe_validation_error
        from deepedge.planning.placement.model import PlacementProblem

        try:
            PlacementProblem.model_validate(value)
        except ValidationError as exc:
            raise ValueError(describe_validation_error(exc)) from exc
        return value

    @field_validator("workload")
    @classmethod
    def _workload_known(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        """The document's own fields here; its model and data are checked by the API in a
        child process (:func:`deepedge.workload.check.check_in_subprocess`)."""
        from deepedge.workload.bundled import BUNDLED

        if isinstance(value, dict):
            from pydantic import ValidationError

            from deepedge.core.errors import describe_validation_error
            from deepedge.workload.spec import WorkloadSpec

            try:
                WorkloadSpec.model_validate(value)
            except ValidationError as exc:
                raise ValueError(describe_validation_error(exc)) from exc
        elif value.endswith(WORKLOAD_FILE_SUFFIXES):
            if not value.startswith("/"):
                raise ValueError(
                    f"workload file {value!r} must be an absolute path on the service host "
                    "(deepedge deploy makes a relative one absolute against the deployment file)"
                )
        elif value not in {SITE_DIGITS, *BUNDLED}:
            raise ValueError(
                f"workload {value!r} is neither {SITE_DIGITS}, a bundled workload "
                f"({', '.join(sorted(BUNDLED))}) nor a workload file "
                f"({'/'.join(WORKLOAD_FILE_SUFFIXES)})"
            )
        return value

    @model_validator(mode="after")
    def _stream_after_base(self) -> DeploymentSpec:
        edge = self.target.kind is TargetKind.EDGE_SERVER
        if edge != (self.update.policy is UpdatePolicy.EKYA_WINDOW):
            raise ValueError(
                "target.kind edge-server goes with update.policy ekya-window (Ekya retrains "
                "on the edge server), target.kind nodes with model-update (Deep-Edge across "
                "the nodes)"
            )
        if not self.target.live and (self.update.ps_node or self.update.models_dir):
            raise ValueError("update.ps_node and update.models_dir need target.live: true")
        if edge and (self.update.ps_node or self.update.models_dir):
            raise ValueError(
                "update.ps_node and update.models_dir plan a model-update across nodes; an "
                "edge server's Ekya window runs on the edge server itself"
            )
        if self.target.live and self.update.executor is ExecutorChoice.THREADS:
            raise ValueError(f"update.{LIVE_NEEDS_RAY}")
        if self.target.live and self.update.time_scale != 0:
            raise ValueError("a live target's devices are real: update.time_scale must be 0")
        if self.stream.onset_window < self.base_windows - 1:
            raise ValueError("stream.onset_window must come after the base windows")
        return self

    @property
    def workload_name(self) -> str:
        if isinstance(self.workload, dict):
            return str(self.workload.get("name", "inline"))
        return self.workload

    @property
    def user_workload(self) -> str | dict[str, Any] | None:
        """The workload reference jobs and :func:`~deepedge.workload.resolve.load_workload`
        take; None for the site's digits stream."""
        return None if self.workload == SITE_DIGITS else self.workload

    def canary_nodes(self) -> list[str]:
        """The first ceil(fraction * nodes) target nodes serve the canary (at least one)."""
        nodes = self.target.nodes
        count = max(1, min(len(nodes), math.ceil(self.canary.fraction * len(nodes) - 1e-9)))
        return self.target.nodes[:count]


def deployment_schema() -> dict[str, Any]:
    return DeploymentSpec.model_json_schema()
