"""Settings of one service instance (all durations in seconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from deepedge.service.sandbox import Confinement, Isolation
from deepedge.service.store import JobStore, sqlite_url
from deepedge.service.uid_range import UidRange, claim_uid_range, default_claims_dir


@dataclass(frozen=True)
class ServiceSettings:
    data_dir: Path
    database_url: str | None = None  # None: SQLite file ``service.db`` in data_dir
    tick_s: float = 0.2  # manager loop period when nothing wakes it (re-attached learners)
    min_tick_gap_s: float = 0.02  # wake-ups (submit, learner exit) coalesce within this gap
    backoff_base_s: float = 0.5  # first deploy retry delay; doubles per failed attempt
    backoff_cap_s: float = 30.0
    learner_start_timeout_s: float = 10.0
    halt_grace_s: float = 3.0
    checkpoint_sync_s: float = 1.0
    # how often the manager counts each tenant's folders against its disk quota (each
    # learner's collector counts its own job's far more often: deepedge.service.disk_quota)
    disk_poll_s: float = 1.0
    control_tick_s: float = 0.1  # control-plane loop period (deployment windows are due-timed)
    control_workers: int = 4  # deployments the control loop advances at once, each on its own
    max_request_bytes: int = 16 << 20  # a request body over this is refused with 413
    # The Ray cluster learners connect to (RAY_ADDRESS of every learner); None: learners
    # inherit the service's environment, which starts an embedded Ray unless it names one.
    ray_address: str | None = None
    # Run each learner as a Ray task on that cluster, placed by its resources (the collector
    # keeps its log and exit status through deepedge.runtime.cluster.ray_learner); needs
    # ray_address.
    learners_on_ray: bool = False
    # GPUs of the host, for the quota an edge server's window asks (None: detected)
    host_gpus: int | None = None
    # How tenant code runs: in a bubblewrap sandbox of its own, or (operator's choice,
    # ``--trusted-tenants``) as the service itself (deepedge.service.sandbox)
    isolation: Isolation = Isolation.SANDBOX
    # /metrics without the operator's token (its counts cover every tenant)
    public_metrics: bool = False
    # Host header values the API answers (a name, or a name:port); besides these, the
    # loopback names always. Others get 400: a DNS-rebinding page cannot reach the API.
    allowed_hosts: tuple[str, ...] = ()
    # The data plane: deployments served through Ray Serve (Open Inference Protocol) on
    # serving_host:serving_port, on the cluster at ray_address or on an embedded Ray head
    # of serving_cpus CPUs (None: this machine's) that the service starts and stops.
    serving: bool = False
    serving_host: str = "127.0.0.1"
    serving_port: int = 8000
    serving_cpus: int | None = None
    serving_object_store_mb: int = 256
    # Ray Serve's high-throughput mode on the embedded head: HAProxy as the HTTP ingress and
    # replicas answering HTTP themselves (False: Serve's Python proxy)
    serving_high_throughput: bool = True
    # A window of live traffic is scored this long after it closes (samples in flight land)
    traffic_settle_s: float = 0.25
    # The host-wide folder where services claim their ranges of sandbox uids
    # (deepedge.service.uid_range; $DEEPEDGE_UID_CLAIMS_DIR, else /var/lib/deepedge/uid-ranges)
    uid_claims_dir: Path = field(default_factory=default_claims_dir)

    def __post_init__(self) -> None:
        # Absolute: learners run in their job's work directory, so a relative data directory
        # (``--data-dir runs/site``) would name files that are not there (the demo's update
        # jobs failed on their document file).
        object.__setattr__(self, "data_dir", Path(self.data_dir).absolute())

    @property
    def url(self) -> str:
        return self.database_url or sqlite_url(self.data_dir / "service.db")

    @property
    def api_socket(self) -> Path:
        """The API's Unix socket (the supervisor listens there too): what a sandboxed job
        with ``api_access`` reaches, the only way out of its network namespace."""
        return self.data_dir / "run" / "api.sock"

    def claim_uids(self, store: JobStore) -> UidRange:
        """Record and claim this service's sandbox uids on the host (:mod:`uid_range`)."""
        return claim_uid_range(store.tenancy, self.data_dir, self.uid_claims_dir)

    def confinement(self) -> Confinement:
        return Confinement(self.isolation, self.api_socket, self.data_dir)
