"""How many of a window's samples are golden-labelled: the deployment's share, raised
while the site recovers from a drift (an update or canary under way, or served accuracy
below the trigger's threshold)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from deepedge.controlplane.deployment_spec import DeploymentSpec
from deepedge.controlplane.records import DeploymentId, DeploymentRecord
from deepedge.controlplane.rollout_status import DeploymentStatus
from deepedge.controlplane.site import label_fraction, recovering
from deepedge.service.records import TenantId

D = DeploymentStatus


def deployment(update: dict[str, Any], **fields: Any) -> DeploymentRecord:
    spec = DeploymentSpec.model_validate(
        {"name": "cam", "trigger": {"accuracy_threshold": 0.8}, "update": update}
    )
    base: dict[str, Any] = dict(
        id=DeploymentId("d"), tenant_id=TenantId("t"), name="cam", spec=spec, status=D.ACTIVE,
        version=1, created_at=0.0, updated_at=0.0, serving_version=2, canary_version=None,
        previous_version=None, window=9, next_window_at=10.0, last_update_window=None,
        samples_since_update=0, canary_windows_done=0, update_requested=False,
        current_job_id=None, last_accuracy=None,
    )  # fmt: skip
    return DeploymentRecord(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [({}, False), ({"last_accuracy": 0.95}, False), ({"last_accuracy": 0.80}, False),
     ({"last_accuracy": 0.79}, True), ({"status": D.UPDATING, "last_accuracy": 0.95}, True),
     ({"status": D.CANARY}, True), ({"status": D.STOPPED}, False)],
)  # fmt: skip
def test_recovering(fields: dict[str, Any], expected: bool) -> None:
    assert recovering(deployment({}, **fields)) is expected


@pytest.mark.parametrize(
    ("update", "fields", "share"),
    [({"label_fraction": 0.4}, {}, 0.4),
     ({"label_fraction": 0.4}, {"status": D.UPDATING}, 1.0),  # the default while recovering
     ({"label_fraction": 0.4, "recovery_label_fraction": 0.6}, {"last_accuracy": 0.5}, 0.6),
     # never below the deployment's own share
     ({"label_fraction": 0.7, "recovery_label_fraction": 0.5}, {"status": D.CANARY}, 0.7)],
)  # fmt: skip
def test_label_fraction(update: dict[str, Any], fields: dict[str, Any], share: float) -> None:
    assert label_fraction(deployment(update, **fields)) == share


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_a_zero_or_impossible_recovery_budget_names_its_field(bad: float) -> None:
    with pytest.raises(ValidationError) as info:
        DeploymentSpec.model_validate({"name": "cam", "update": {"recovery_label_fraction": bad}})
    assert info.value.errors()[0]["loc"] == ("update", "recovery_label_fraction")
