"""Fixtures every test folder may use: a user's own workload (tests/_workload_helpers.py),
one local Ray per test module (``ray_cluster``), and a CLI context of each test's own."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# One OpenBLAS thread in each test process and in every process it starts (services,
# learners, benchmarks), read when numpy and scipy load their OpenBLAS: the suite runs a test
# process per core, and a second BLAS thread per process only contends for a core already
# taken (on a loaded 2-core machine a small logistic regression took 3-4x as long). torch
# keeps its own threads (MKL/OpenMP), which the tests set where they matter.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest

from _workload_helpers import write_workload

pytest_plugins = ["_store_fixtures"]


@pytest.fixture(scope="session", autouse=True)
def _own_uid_claims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The services the tests start claim their sandbox uids in a folder of the session's
    own, never in the host's /var/lib/deepedge (deepedge.service.uid_range)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEEPEDGE_UID_CLAIMS_DIR", str(tmp_path_factory.mktemp("uid-claims")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _golden_labeller_cached(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The site's golden labeller of the default stream, trained once per machine into its
    cache before any test (about a minute on a fresh machine; the processes of a parallel
    run wait for one trainer): no test's own time limit pays for it."""
    import torch

    from deepedge.controlplane.deployment_spec import DeploymentSpec
    from deepedge.controlplane.site import Site

    threads = torch.get_num_threads()
    site = Site(tmp_path_factory.mktemp("golden-site"))  # (a site takes one thread)
    torch.set_num_threads(threads)  # the test process keeps its own
    site.golden(DeploymentSpec(name="warm"))


@pytest.fixture(autouse=True)
def _own_cli_context(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test's CLI context file and debug log are its own (``deepedge serve`` and
    ``demo --site`` write a context, Ray's messages go to the debug log): none reads or
    overwrites the user's."""
    folder = tmp_path_factory.mktemp("context")
    monkeypatch.setenv("DEEPEDGE_CONTEXT", str(folder / "context.json"))
    monkeypatch.setenv("DEEPEDGE_DEBUG_LOG", str(folder / "debug.log"))
    for name in ("DEEPEDGE_URL", "DEEPEDGE_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def user_workload(tmp_path: Path) -> Callable[..., Path]:
    """``user_workload(**overrides)``: a site's model package, image folder and workload
    document under ``tmp_path``; returns the document's path."""

    def make(**overrides: Any) -> Path:
        return write_workload(tmp_path, **overrides)

    return make


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """One local Ray for the tests of a module that need it, shut down at the module's end."""
    import ray

    from deepedge.runtime.cluster.session import patient_raylet_wait

    # address="local": never attach to a cluster that `ray start` left on this machine.
    with patient_raylet_wait():  # a loaded CI machine can take Ray's whole 30 s
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    try:
        yield
    finally:
        ray.shutdown()
