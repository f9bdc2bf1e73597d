"""What the data plane serves: the table the control plane publishes and replicas follow.

The control plane's decisions (which version serves, which is the canary and on what share,
which keys are live) live in the service's store; the data plane's controller reads them
into one :class:`ServingTable` and every replica long-polls it, so a promotion, a rollback
or a revoked key reaches the replicas within a poll, and a replica keeps serving its last
table while the control plane (or the controller) is down or restarting.

A model's OIP name is ``<tenant>.<deployment>`` (:func:`model_name`): one URL space for the
site, no two tenants' names colliding, and a key of one tenant never learns whether another
tenant's model exists (:mod:`deepedge.dataplane.keys`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from deepedge.dataplane.keys import KeyGrant
from deepedge.dataplane.protocol import Signature, TensorSpec
from deepedge.dataplane.replica_groups import GroupPlan
from deepedge.dataplane.routing import Versions
from deepedge.dataplane.sample_store import Retention


def model_name(tenant: str, deployment: str) -> str:
    return f"{tenant}.{deployment}"


@dataclass(frozen=True)
class ReplicaShape:
    """How a deployment's replicas are run: how many, each one's CPU and GPU share, and its
    dynamic batching (a batch closes at ``max_batch_size`` images or after
    ``batch_wait_ms``)."""

    replicas: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_ongoing_requests: int = 256
    nodes: tuple[str, ...] = ()  # live node ids the replicas must run on (empty: anywhere)

    @property
    def threads(self) -> int:
        return max(1, round(self.cpus))


@dataclass(frozen=True)
class InferenceShare:
    """Ekya's share of the edge server for one stream's inference in one window (Thief's
    ``inference_gpus``: a GPU fraction, or CPU cores on a server without a GPU)."""

    gpus: float
    window: int | None = None
    server: str = ""
    on_gpu: bool = False  # a live edge server with a GPU: the share is a GPU fraction

    def per_replica(self, replicas: int) -> float:
        """Each of ``replicas`` replicas' part of the stream's share."""
        return self.gpus / max(1, replicas)

    def threads(self, replicas: int = 1) -> int:
        """The CPU threads each replica's part buys on a server without a GPU."""
        return max(1, round(self.per_replica(replicas)))


@dataclass(frozen=True)
class ModelRoute:
    """One deployment as the data plane serves it."""

    model: str  # the OIP model name
    deployment_id: str
    tenant_id: str
    signature: Signature
    class_names: tuple[str, ...]
    versions: Versions
    artifacts: dict[int, str]  # version -> its served ONNX graph (every loaded version)
    digests: dict[int, str]  # version -> the file's SHA-256 (a changed file is reloaded)
    shape: ReplicaShape = field(default_factory=ReplicaShape)
    sample_fraction: float = 0.1
    retention: Retention = field(default_factory=Retention)
    groups: GroupPlan | None = None  # the placement decision's replica groups and cameras
    share: InferenceShare | None = None  # Ekya's newest share (edge-server deployments)

    @property
    def classes(self) -> int:
        return len(self.class_names)

    @property
    def threads(self) -> int:
        """The threads a replica runs with: Ekya's share on a CPU edge server (applied live,
        no restart), else the shape's CPU share."""
        if self.share is not None and self.shape.gpus == 0:
            return self.share.threads(self.shape.replicas)
        return self.shape.threads

    def app_fingerprint(self) -> str:
        """What needs the Serve application itself redeployed when it changes (replica
        count, resources, batching, placement); routing changes only need the table."""
        return _digest({"shape": asdict(self.shape),
                        "groups": asdict(self.groups) if self.groups else None})  # fmt: skip


@dataclass(frozen=True)
class ServingTable:
    routes: dict[str, ModelRoute]  # by OIP model name
    keys: dict[str, KeyGrant]  # by key digest (live keys only)
    revision: str = ""

    @staticmethod
    def build(routes: dict[str, ModelRoute], keys: dict[str, KeyGrant]) -> ServingTable:
        revision = _digest(
            {
                "routes": {name: asdict(route) for name, route in sorted(routes.items())},
                "keys": {d: asdict(g) for d, g in sorted(keys.items())},
            }
        )
        return ServingTable(routes, keys, revision)


def _digest(document: Any) -> str:
    raw = json.dumps(document, sort_keys=True, default=_plain).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def _plain(value: Any) -> Any:
    if isinstance(value, Signature | TensorSpec | Versions | Retention | InferenceShare):
        return asdict(value)
    if isinstance(value, tuple | set):
        return list(value)
    return str(value)
