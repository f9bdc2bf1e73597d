"""``python -m deepedge.runtime.ray_start ARGS``: ``ray start ARGS``, patient with its raylet.

``ray start`` gives a new raylet Ray's fixed 30 s to register, the wait that
:func:`deepedge.runtime.session.patient_raylet_wait` stretches for an embedded Ray. On a
loaded machine (a site's edge server, a shared CI host) a joining raylet missed it and
``ray start`` gave up on a node that was still starting. This entry point runs Ray's own
command line under that stretched wait; the agent's join
(:func:`deepedge.runtime.node_agent.join_cluster`) and
:class:`~deepedge.runtime.local_cluster.LocalRayCluster` start their raylets with it.
"""

from __future__ import annotations

import sys

from deepedge.runtime.session import patient_raylet_wait


def command(args: list[str]) -> list[str]:
    """The argv that runs ``ray start ARGS`` through this module with this interpreter."""
    return [sys.executable, "-m", "deepedge.runtime.ray_start", *args]


def main(argv: list[str]) -> int:
    from ray.scripts.scripts import cli

    sys.argv = ["ray", "start", *argv]
    with patient_raylet_wait():
        try:
            cli()
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
