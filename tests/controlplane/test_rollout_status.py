"""The two transition tables of deployments and versions, and deployment documents."""

from __future__ import annotations

import pytest

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.rollout_status import (
    DeploymentStatus,
    VersionStatus,
    check_deployment_transition,
    check_version_transition,
)
from deepedge.core.errors import IllegalTransitionError


@pytest.mark.parametrize(
    ("current", "target", "legal"),
    [(DeploymentStatus.ACTIVE, DeploymentStatus.UPDATING, True),
     (DeploymentStatus.UPDATING, DeploymentStatus.CANARY, True),
     (DeploymentStatus.CANARY, DeploymentStatus.UPDATING, True),  # a drift overtook it
     (DeploymentStatus.STOPPED, DeploymentStatus.ACTIVE, False)],
)  # fmt: skip
def test_deployment_transitions(
    current: DeploymentStatus, target: DeploymentStatus, legal: bool
) -> None:
    if legal:
        check_deployment_transition(current, target)
    else:
        with pytest.raises(IllegalTransitionError):
            check_deployment_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target", "legal"),
    [(VersionStatus.TRAINING, VersionStatus.CANDIDATE, True),
     (VersionStatus.CANDIDATE, VersionStatus.CANARY, True),
     (VersionStatus.CANARY, VersionStatus.SERVING, True),
     (VersionStatus.RETIRED, VersionStatus.SERVING, True),
     (VersionStatus.TRAINING, VersionStatus.CANCELLED, True),
     (VersionStatus.CANARY, VersionStatus.CANCELLED, True),
     (VersionStatus.SERVING, VersionStatus.CANCELLED, False),
     (VersionStatus.CANCELLED, VersionStatus.TRAINING, False),
     (VersionStatus.TRAINING, VersionStatus.SERVING, False),
     (VersionStatus.ROLLED_BACK, VersionStatus.SERVING, False),
     (VersionStatus.REJECTED, VersionStatus.CANARY, False)],
)  # fmt: skip
def test_version_transitions(current: VersionStatus, target: VersionStatus, legal: bool) -> None:
    if legal:
        check_version_transition(current, target)
    else:
        with pytest.raises(IllegalTransitionError):
            check_version_transition(current, target)


@pytest.mark.parametrize(
    ("document", "field"),
    [({"name": "x", "workload": "imagenet"}, "workload"),
     ({"name": "x", "target": {"nodes": ["pi-9"]}}, "target"),
     ({"name": "x", "canary": {"fraction": 1.5}}, "canary"),
     ({"name": "bad name"}, "name")],
)  # fmt: skip
def test_bad_deployment_documents_name_the_field(document: dict[str, object], field: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as info:
        DeploymentSpec.model_validate(document)
    assert str(info.value.errors()[0]["loc"][0]) == field


@pytest.mark.parametrize(("fraction", "nodes"), [(0.25, 1), (0.26, 2), (0.5, 2), (0.75, 3)])
def test_canary_nodes_are_a_ceiling_share(fraction: float, nodes: int) -> None:
    spec = DeploymentSpec.model_validate({"name": "x", "canary": {"fraction": fraction}})
    assert len(spec.canary_nodes()) == nodes


def test_committed_deployment_schema_and_example_are_current() -> None:
    import json
    from pathlib import Path

    import yaml

    from deepedge.controlplane.deployment_spec import deployment_schema

    root = Path(__file__).resolve().parents[2]
    committed = json.loads((root / "docs/schemas/deployment.schema.json").read_text())
    assert committed == deployment_schema()
    example = yaml.safe_load((root / "examples/deployments/digits-line.yaml").read_text())
    assert DeploymentSpec.model_validate(example).canary_nodes() == ["tx2-1"]
    edge = yaml.safe_load((root / "examples/deployments/digits-edge-server.yaml").read_text())
    assert DeploymentSpec.model_validate(edge).update.policy == "ekya-window"
    # A relative workload file is made absolute by `deepedge deploy` against the example's
    # folder; the file it names is there and is a workload document.
    site = root / "examples/deployments/site-workload.yaml"
    document = yaml.safe_load(site.read_text())
    workload = (site.parent / document["workload"]).resolve()
    spec = DeploymentSpec.model_validate({**document, "workload": str(workload)})
    assert spec.user_workload == str(workload) and workload.is_file()


def _autogroup_is_settable(nice: int) -> bool:
    """Whether a learner's limits lower its session's CPU share here: a probe process in a
    session of its own applies the same limits and reads its share back (not every kernel or
    container lets a process set it; the limits then leave it as it is)."""
    import subprocess
    import sys

    probe = (
        "import os\n"
        "from deepedge.core.limits import LearnerLimits\n"
        f"LearnerLimits(mem_mb=4096, nice={nice}).apply()\n"
        "path = '/proc/self/autogroup'\n"
        "print(open(path).read() if os.path.exists(path) else '')\n"
    )
    # In a session of its own, so that the probe never lowers the test run's share.
    done = subprocess.run(
        [sys.executable, "-c", probe], start_new_session=True, capture_output=True, text=True
    )
    return done.returncode == 0 and f"nice {nice}" in done.stdout


@pytest.mark.parametrize("nice", [0, 7])
def test_the_collector_lowers_the_learners_cpu_priority(tmp_path: object, nice: int) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(str(tmp_path))
    base = os.nice(0)
    child = (
        "import os; print('niceness', os.nice(0)); "
        "print('autogroup', open('/proc/self/autogroup').read() "
        "if os.path.exists('/proc/self/autogroup') else 'none')"
    )
    # The service starts each collector in a session of its own; so does the test, so that the
    # lowered session share is the collector's and not the test run's.
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.service.collector",
         "--log", str(root / "log"), "--pid-file", str(root / "pid"),
         "--exit-file", str(root / "exit"), "--cwd", str(root), "--attempt", "0",
         "--mem-mb", "4096", "--nice", str(nice), "--", sys.executable, "-c", child],
        start_new_session=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0
    log = (root / "log").read_text()
    assert f"niceness {min(base + nice, 19)}" in log
    if nice and _autogroup_is_settable(nice):  # the session's share is lowered too
        assert f"nice {nice}" in log
    else:
        assert "autogroup" in log  # the child ran to its last line


@pytest.mark.parametrize(
    ("target", "policy", "error"),
    [({"kind": "edge-server"}, "ekya-window", None),
     ({"kind": "edge-server", "nodes": ["edge-1"], "gpus": 2}, "ekya-window", None),
     ({"kind": "nodes", "nodes": ["nano-1"]}, "model-update", None),
     ({"kind": "edge-server"}, "model-update", "goes with update.policy ekya-window"),
     ({"kind": "nodes"}, "ekya-window", "goes with update.policy ekya-window"),
     ({"kind": "edge-server", "nodes": ["nano-1"]}, "ekya-window", "unknown edge-server"),
     ({"kind": "nodes", "nodes": ["edge-1"]}, "model-update", "unknown nodes node"),
     ({"kind": "edge-server", "gpus": 0}, "ekya-window", "gpus")],
)  # fmt: skip
def test_an_edge_server_target_goes_with_ekya_windows(
    target: dict[str, object], policy: str, error: str | None
) -> None:
    from pydantic import ValidationError

    document = {"name": "x", "target": target, "update": {"policy": policy}}
    if error is None:
        spec = DeploymentSpec.model_validate(document)
        edge = target["kind"] == "edge-server"
        assert spec.target.nodes == (["edge-1"] if edge else target.get("nodes"))
        assert spec.canary_nodes() == spec.target.nodes[:1]
    else:
        with pytest.raises(ValidationError, match=error):
            DeploymentSpec.model_validate(document)


@pytest.mark.parametrize(
    ("workload", "error"),
    [("digits", None), ("resnet-photos", None), ("/srv/site/workload.yaml", None),
     ("site/workload.yaml", "absolute path"), ("mnist", "neither digits"),
     ({"name": "w", "model": {"entry_point": "m:f"}, "input": {"size": [8, 8]},
       "data": {"kind": "folder", "root": "/srv/images"}}, None),
     ({"name": "w", "model": {"entry_point": "m:f"}, "input": {"size": [8, 8]},
       "data": {"kind": "folder"}}, "data")],
)  # fmt: skip
def test_a_deployment_takes_any_workload_reference(workload: object, error: str | None) -> None:
    from pydantic import ValidationError

    document = {"name": "x", "workload": workload}
    if error is None:
        spec = DeploymentSpec.model_validate(document)
        assert spec.user_workload == (None if workload == "digits" else workload)
    else:
        with pytest.raises(ValidationError, match=error):
            DeploymentSpec.model_validate(document)
