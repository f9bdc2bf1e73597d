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
        {
            "name": "cam",
            "trigger": {"sample_count": None, "accuracy_threshold": 0.8},
            "update": update,
        }
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
    ("fields", "recovery", "expected"),
    [({}, False, False), ({"last_accuracy": 0.95}, False, False),
     ({"last_accuracy": 0.80}, False, False), ({"last_accuracy": 0.79}, False, True),
     ({"status": D.UPDATING, "last_accuracy": 0.95}, True, True),
     ({"status": D.CANARY}, True, True),
     # an update a sample count or a schedule started is routine: the budget stays small
     ({"status": D.UPDATING, "last_accuracy": 0.95}, False, False),
     ({"status": D.CANARY}, False, False),
     ({"status": D.UPDATING, "last_accuracy": 0.5}, False, True)],
)  # fmt: skip
def test_recovering(fields: dict[str, Any], recovery: bool, expected: bool) -> None:
    assert recovering(deployment({}, **fields), recovery) is expected


def test_only_an_update_a_drop_started_is_a_recovery() -> None:
    from deepedge.controlplane.records import TriggerKind, WindowPoint
    from deepedge.controlplane.recovery import drop_under_way

    def point(w: int, trigger: TriggerKind) -> WindowPoint:
        return WindowPoint(w, 0.0, 0.0, 1, 0.9, None, None, None, None, 30, trigger, 0.0)

    history = [point(5, TriggerKind.ACCURACY_DROP), point(6, TriggerKind.NONE),
               point(7, TriggerKind.SAMPLE_COUNT)]  # fmt: skip
    assert drop_under_way(deployment({}, last_update_window=5), history)
    assert not drop_under_way(deployment({}, last_update_window=7), history)
    assert not drop_under_way(deployment({}, last_update_window=None), history)


@pytest.mark.parametrize(
    ("update", "fields", "recovery", "share"),
    [({"label_fraction": 0.4}, {}, False, 0.4),
     ({"label_fraction": 0.4}, {"status": D.UPDATING}, True, 0.5),  # the default while recovering
     ({"label_fraction": 0.4, "recovery_label_fraction": 0.6}, {"last_accuracy": 0.5}, False, 0.6),
     # never below the deployment's own share
     ({"label_fraction": 0.7, "recovery_label_fraction": 0.5}, {"status": D.CANARY}, True, 0.7)],
)  # fmt: skip
def test_label_fraction(
    update: dict[str, Any], fields: dict[str, Any], recovery: bool, share: float
) -> None:
    assert label_fraction(deployment(update, **fields), recovery) == share


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_a_zero_or_impossible_recovery_budget_names_its_field(bad: float) -> None:
    with pytest.raises(ValidationError) as info:
        DeploymentSpec.model_validate({"name": "cam", "update": {"recovery_label_fraction": bad}})
    assert info.value.errors()[0]["loc"] == ("update", "recovery_label_fraction")


def _samples(n: int) -> list[Any]:
    import numpy as np

    from deepedge.dataplane.routing import RouteKind
    from deepedge.dataplane.sample_store import StoredSample

    image = np.zeros((1, 16, 16), np.float32)
    return [StoredSample(f"r{i:03d}", float(i), 2, RouteKind.SERVING, 0, image, None, None)
            for i in range(n)]  # fmt: skip


def test_every_sample_labelled_is_all_unbiased(tmp_path: Any) -> None:
    """Labelling every sample picks none, so none is a 'hard' one left out of decisions:
    a recovering window's decisions stand on all its labels, not half."""
    from deepedge.controlplane.site import Site

    site = Site(tmp_path)
    chosen, hard = site._to_label(deployment({"label_fraction": 1.0}), 3, _samples(40), 1.0)
    assert len(chosen) == 40 and hard == set()


def test_the_golden_cache_is_shared_private_and_survives_a_torn_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Golden ensembles are kept per machine (one training serves every site), owner-only;
    a torn cache file is retrained over, not a crash."""
    import os

    from deepedge.controlplane import golden_labeller
    from deepedge.controlplane.site import Site

    monkeypatch.setenv("DEEPEDGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(golden_labeller, "GOLDEN_POOL", 128)  # a small ensemble: a unit test
    monkeypatch.setattr(golden_labeller, "GOLDEN_EPOCHS", 1)
    folder = golden_labeller.golden_cache()
    assert folder == tmp_path / "cache" / "golden" and folder.stat().st_mode & 0o777 == 0o700
    spec = deployment({}).spec
    first = Site(tmp_path / "a")
    key = golden_labeller.golden_key(first.stream(spec))
    first.golden(spec)
    (path,) = folder.glob(f"golden-{key}.pt")
    assert path.stat().st_mode & 0o777 == 0o600
    made = path.stat().st_mtime_ns
    second = Site(tmp_path / "b")  # another site: loads, does not train
    assert golden_labeller.golden_key(second.stream(spec)) == key
    second.golden(spec)
    assert path.stat().st_mtime_ns == made
    path.write_bytes(b"torn")
    Site(tmp_path / "c").golden(spec)  # retrained over the torn file
    assert path.stat().st_size > 100
    os.chmod(folder, 0o755)  # widened by hand: narrowed again
    golden_labeller.golden_cache()
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_window_that_shows_a_drop_is_told_on_its_serving_share() -> None:
    """The serving version's share of a window's unbiased labels below the threshold (on
    enough of them) raises that same window's labels to the recovery share."""
    import numpy as np

    from deepedge.controlplane.site import TrafficWindow, _served_below
    from deepedge.dataplane.routing import RouteKind

    def window(right: int, n: int, canary: int = 0) -> TrafficWindow:
        routes = (RouteKind.SERVING,) * n + (RouteKind.CANARY,) * canary
        labels = np.zeros(n + canary, np.int64)
        predictions = np.array([0] * right + [1] * (n - right) + [1] * canary)
        return TrafficWindow(3, 0.0, 1.0, 0.0, tuple(map(str, range(n + canary))),
                             np.zeros((n + canary, 1, 4, 4)), labels, predictions,
                             np.full(n + canary, 2), routes, n + canary)  # fmt: skip

    assert _served_below(window(6, 20), 0.8) == pytest.approx(0.3)
    assert _served_below(window(18, 20), 0.8) is None  # at its level
    assert _served_below(window(2, 9), 0.8) is None  # too few to tell
    assert _served_below(window(20, 20, canary=30), 0.8) is None  # the canary's misses
