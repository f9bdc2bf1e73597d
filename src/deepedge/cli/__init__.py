"""The ``deepedge`` command line. Each concept's commands live in their own module."""

from __future__ import annotations

from deepedge.cli import agent as _agent  # noqa: F401
from deepedge.cli import demo as _demo  # noqa: F401
from deepedge.cli import deployments as _deployments  # noqa: F401
from deepedge.cli import edge as _edge  # noqa: F401
from deepedge.cli import jobs as _jobs  # noqa: F401
from deepedge.cli import place as _place  # noqa: F401
from deepedge.cli import profile as _profile  # noqa: F401
from deepedge.cli import service as _service  # noqa: F401
from deepedge.cli import serving as _serving  # noqa: F401
from deepedge.cli import shard as _shard  # noqa: F401
from deepedge.cli import tenants as _tenants  # noqa: F401
from deepedge.cli import update as _update  # noqa: F401
from deepedge.cli import window as _window  # noqa: F401
from deepedge.cli import workload as _workload  # noqa: F401
from deepedge.cli.app import app


def main() -> None:
    app()


__all__ = ["app", "main"]
