"""The job manifest: what a user submits (YAML or JSON), validated before anything is stored.

Every path in a manifest is relative to the job's own working directory; absolute paths and
paths that climb out of it (``..``) are rejected here, and again against the real directory
(symlinks included) when the job is deployed (:mod:`deepedge.service.workspace`).
"""

from __future__ import annotations

import enum
import posixpath
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

MAX_ARGV = 256
MAX_ARG_CHARS = 4096
MAX_ENV_VARS = 128
# argv and env together stay far below the kernel's limit for a new program's arguments
# and environment (2 MiB with the default stack; a job with more would be accepted and
# fail at every launch with "Argument list too long").
MAX_ARGV_BYTES = 128 * 1024
MAX_ENV_BYTES = 128 * 1024
MAX_SECONDS = 30 * 86_400  # 30 days: every duration has a ceiling
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class JobKind(enum.StrEnum):
    COMMAND = "command"
    PLACEMENT = "placement"
    EKYA_WINDOW = "ekya-window"
    MODEL_UPDATE = "model-update"


def check_relative_path(value: str) -> str:
    """Accept only a normalised relative path that stays inside its root."""
    if not value or "\x00" in value:
        raise ValueError("path must be a non-empty string without NUL bytes")
    if value.startswith(("/", "\\")) or (len(value) > 1 and value[1] == ":"):
        raise ValueError(f"path {value!r} is absolute; paths are relative to the job directory")
    normalised = posixpath.normpath(value.replace("\\", "/"))
    if normalised == ".." or normalised.startswith("../"):
        raise ValueError(f"path {value!r} escapes the job directory")
    return normalised


RelPath = Annotated[str, Field(min_length=1, max_length=1024)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Resources(Strict):
    """What one learner may use; enforced as rlimits on the learner subprocess and a memory
    cgroup of ``mem_mb`` around it (on the service's machine, or on its node when the
    service runs learners on a Ray cluster, where they are also the Ray task's
    ``num_cpus``, ``num_gpus``, ``memory`` and node)."""

    cpus: float = Field(1.0, gt=0, le=256, description="cores counted against the quota")
    gpus: int = Field(0, ge=0, le=64)
    mem_mb: int = Field(
        2048, ge=16, le=1_048_576,
        description="address-space limit of each process, and where the service can make a "
        "memory cgroup, the memory of all the learner's processes together, its /tmp and "
        "/dev/shm included",
    )  # fmt: skip
    cpu_time_s: int | None = Field(
        None, ge=1, le=MAX_SECONDS, description="CPU-time limit per learner"
    )
    max_open_files: int = Field(1024, ge=16, le=65536)
    max_processes: int = Field(
        1024, ge=16, le=4096,
        description="processes and threads the tenant's sandbox user may have (all of its "
        "sandboxes together; a fork bomb stops there)",
    )  # fmt: skip
    max_file_mb: int = Field(
        16_384, ge=1, le=1_048_576,
        description="largest file a learner may write (at most its tenant's disk quota)",
    )  # fmt: skip
    tmp_mb: int = Field(
        1024, ge=16, le=65_536,
        description="size of the sandbox's /tmp and of its /dev/shm (each at most mem_mb)",
    )  # fmt: skip
    nice: int = Field(
        0, ge=0, le=19, description="CPU priority below the service's own (0: the same)"
    )
    node: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="deepedge node to run on (its deepedge-node:<id> Ray resource); only "
        "where the service runs learners on Ray, ignored by local learners",
    )


class DataSource(Strict):
    """Training data: a bundled dataset (``builtin:digits``) or a path in the job directory."""

    source: str = Field("builtin:digits", min_length=1, max_length=1024)

    @field_validator("source")
    @classmethod
    def _source_is_safe(cls, value: str) -> str:
        if value.startswith("builtin:"):
            if value not in {"builtin:digits", "builtin:camera"}:
                raise ValueError("builtin sources are builtin:digits and builtin:camera")
            return value
        return check_relative_path(value)


class CommandSpec(Strict):
    """Any user command as the learner (frameworks deepedge does not know)."""

    argv: list[Annotated[str, Field(max_length=MAX_ARG_CHARS)]] = Field(
        ..., min_length=1, max_length=MAX_ARGV
    )
    env: dict[
        Annotated[str, Field(pattern=ENV_NAME)], Annotated[str, Field(max_length=MAX_ARG_CHARS)]
    ] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    cwd: RelPath = "."

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\x00" in a for a in value) or not value[0]:
            raise ValueError("argv items must be non-empty at [0] and contain no NUL bytes")
        size = sum(len(a.encode()) + 1 for a in value)
        if size > MAX_ARGV_BYTES:
            raise ValueError(f"argv is {size} bytes; at most {MAX_ARGV_BYTES} in all")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            if "\x00" in item:
                raise ValueError(f"{key}: values may not contain NUL bytes")
            if key.startswith("DEEPEDGE_"):
                raise ValueError(f"{key}: DEEPEDGE_* variables are set by the service")
        size = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in value.items())
        if size > MAX_ENV_BYTES:
            raise ValueError(f"env is {size} bytes; at most {MAX_ENV_BYTES} in all")
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd_inside(cls, value: str) -> str:
        return check_relative_path(value)


class DocumentSpec(Strict):
    """A planner or update document given inline; validated by the kind's own model."""

    document: dict[str, Any]


def _spec_tag(value: Any) -> str | None:
    """Which spec shape a raw value has: ``argv`` makes it a command, else a document."""
    if isinstance(value, CommandSpec | DocumentSpec):
        return type(value).__name__
    if not isinstance(value, dict):
        return None
    return "CommandSpec" if "argv" in value else "DocumentSpec"


class JobManifest(Strict):
    """A job as submitted. ``spec`` carries the kind's own part; ``kind`` selects it."""

    name: str = Field(..., min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    kind: JobKind
    framework: str = Field("pytorch", min_length=1, max_length=64)
    learners: int = Field(1, ge=1, le=64, description="learner processes started together")
    resources: Resources = Field(default_factory=Resources)
    data: DataSource = Field(default_factory=DataSource)
    checkpoint_interval_s: float = Field(30.0, gt=0, le=86_400)
    checkpoint_retention: int = Field(3, ge=1, le=100)
    retry_limit: int = Field(3, ge=0, le=20, description="deploy attempts after the first")
    restart_limit: int = Field(3, ge=0, le=100, description="learner restarts before FAILED")
    max_runtime_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    api_access: bool = Field(
        False,
        description="the learners may call this service's API (and nothing else on the "
        "network) with a token of the job's own, revoked when it ends: DEEPEDGE_URL and "
        "DEEPEDGE_TOKEN in their environment",
    )
    spec: Annotated[
        Annotated[CommandSpec, Tag("CommandSpec")] | Annotated[DocumentSpec, Tag("DocumentSpec")],
        Discriminator(
            _spec_tag,
            custom_error_type="spec_shape",
            custom_error_message="spec must be an object with argv (command) or document",
        ),
    ]

    @model_validator(mode="after")
    def _spec_matches_kind(self) -> JobManifest:
        wants_command = self.kind is JobKind.COMMAND
        if wants_command and not isinstance(self.spec, CommandSpec):
            raise ValueError("spec: a command job needs spec.argv (a list of strings)")
        if not wants_command and not isinstance(self.spec, DocumentSpec):
            raise ValueError(f"spec: a {self.kind} job needs spec.document (an object)")
        return self

    @property
    def cores(self) -> float:
        return self.resources.cpus * self.learners

    @property
    def gpus(self) -> int:
        return self.resources.gpus * self.learners


def parse_manifest(raw: Any) -> JobManifest:
    """Validate a decoded document; pydantic's ValidationError names the failing field."""
    return JobManifest.model_validate(raw)


def manifest_schema() -> dict[str, Any]:
    """JSON Schema of :class:`JobManifest` (committed as docs/schemas/job-manifest)."""
    return JobManifest.model_json_schema(by_alias=True)
