"""``python -m deepedge.runtime.cluster.ray_start ARGS``: Ray's own ``ray start ARGS``, with the
raylet given :data:`~deepedge.runtime.cluster.session.RAYLET_WAIT_S` to register.

``ray start`` waits a fixed 30 s for its raylet, which a loaded host misses (the data
plane's head on a busy edge server failed to start that way, again and again); the
in-process starts already stretch that wait (:func:`~deepedge.runtime.cluster.session.
patient_raylet_wait`), and this entry point does the same for the nodes that
:class:`~deepedge.runtime.cluster.local_cluster.LocalRayCluster` launches as processes. Only the
node's construction runs on the patient clock; the rest of the command is Ray's as is.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    from ray._private import node as ray_node
    from ray.scripts.scripts import main as ray_main

    from deepedge.runtime.cluster.session import patient_raylet_wait

    construct = ray_node.Node.__init__

    def patient(self: Any, *args: Any, **kwargs: Any) -> None:
        with patient_raylet_wait():
            construct(self, *args, **kwargs)

    ray_node.Node.__init__ = patient  # type: ignore[method-assign]
    sys.argv[0] = "ray"
    ray_main()


if __name__ == "__main__":
    main()
