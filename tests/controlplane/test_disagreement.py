"""A kept version against the served answers, told on the requests the two answer apart:
which versions get a census, how it reads, and what it labels."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from deepedge.controlplane.disagreement import (
    CENSUS_CAP,
    Census,
    inputs_moved,
    needs_census,
    take_canary_census,
    take_census,
    with_census,
)
from deepedge.controlplane.evidence import paired_from_counts
from deepedge.controlplane.records import DeploymentId, DeploymentRecord
from deepedge.controlplane.rollout_status import DeploymentStatus, VersionStatus
from deepedge.controlplane.site import TrafficWindow
from deepedge.core.errors import TenantCodeError
from deepedge.dataplane.routing import RouteKind
from deepedge.dataplane.sample_store import (
    GOLDEN,
    GOLDEN_DISCORDANT,
    Retention,
    Sample,
    SampleStore,
)
from deepedge.service.records import TenantId

CONFIDENCE = 0.975  # 0.95 shared by two kept versions (Bonferroni)
# the window [0, 5) a census reads from the store (its uniform labels are not needed there)
WINDOW = TrafficWindow(5, 0.0, 5.0, 0.0, (), np.zeros((0,)), np.zeros(0, np.int64),
                       np.zeros(0, np.int64), np.zeros(0, np.int64), (), 0)  # fmt: skip


@pytest.mark.parametrize(
    ("table", "moved", "expected"),
    [((28, 1, 0, 1), False, True),  # looks better, cannot tell: counted
     ((29, 0, 0, 1), False, False),  # nothing tells them apart, inputs as before: not
     ((29, 0, 0, 1), True, True),  # the same after the inputs moved: counted
     ((27, 0, 2, 1), True, True),  # looks worse, undecided, inputs moved
     ((10, 0, 19, 1), True, False),  # worse, decided
     ((10, 19, 0, 1), False, False)],  # better, decided: no census needed
)  # fmt: skip
def test_which_kept_versions_are_counted(table: tuple[int, int, int, int], moved: bool,
                                         expected: bool) -> None:  # fmt: skip
    assert needs_census(paired_from_counts(*table, CONFIDENCE), moved) is expected


def test_inputs_moved() -> None:
    assert inputs_moved(0.05, 0.9) and inputs_moved(0.9, 0.1)
    assert not inputs_moved(0.5, 0.4) and not inputs_moved(0.5, None)


def test_a_four_point_gap_the_uniform_labels_cannot_tell_the_census_does() -> None:
    """150 requests of a window, 30 uniformly labelled: the kept version is right on 8 the
    served answers got wrong and never the reverse (a gap of 5 points). One disagreement is
    among the uniform labels (undecided); the census of all eight decides, and its
    difference is exact."""
    uniform = paired_from_counts(28, 1, 0, 1, CONFIDENCE)
    assert uniform.low <= 0.0 and needs_census(uniform, moved=False)
    counted = with_census(uniform, Census(1, agree=142, kept_only=8, served_only=0, both_wrong=0))
    assert counted.n == 150 and counted.diff == pytest.approx(8 / 150)
    assert counted.low > 0.0 and counted.confidence == CONFIDENCE
    assert counted.a_only == 8 and counted.b_only == 0
    # the agreements split as the uniform labels' concordant pairs (28 right of 29)
    assert counted.both == round(142 * 28 / 29)
    # the same gap the other way round: the kept version is not brought back
    worse = with_census(uniform, Census(1, agree=142, kept_only=0, served_only=8, both_wrong=0))
    assert worse.high < 0.0
    # as many each way: no difference to act on
    even = with_census(uniform, Census(1, agree=142, kept_only=4, served_only=4, both_wrong=0))
    assert even.low < 0.0 < even.high


def _deployment() -> DeploymentRecord:
    from deepedge.controlplane.deployment_spec import DeploymentSpec

    spec = DeploymentSpec.model_validate({"name": "cam", "trigger": {"sample_count": None}})
    return DeploymentRecord(
        id=DeploymentId("d"), tenant_id=TenantId("t"), name="cam", spec=spec,
        status=DeploymentStatus.ACTIVE, version=1, created_at=0.0, updated_at=0.0,
        serving_version=3, canary_version=None, previous_version=2, window=4,
        next_window_at=10.0, last_update_window=None, samples_since_update=0,
        canary_windows_done=0, update_requested=False, current_job_id=None,
        last_accuracy=None,
    )  # fmt: skip


class _Site:
    """The parts of a site a census reads: its real sample store and a golden labeller that
    gives the true label (the image's first pixel) and counts what it was asked."""

    def __init__(self, root: Any) -> None:
        self.samples = SampleStore(root / "samples.db")
        self.asked = 0
        self.fails = False
        self.silent = False

    def golden_labels(self, deployment: DeploymentRecord, images: np.ndarray) -> Any:
        if self.fails:
            raise TenantCodeError("the labeller timed out")
        if self.silent:
            return None
        self.asked += len(images)
        return images[:, 0, 0, 0].astype(np.int64)


def _fill(site: _Site, n: int) -> None:
    """Stores ``n`` requests of the serving version v3 in [0, 5): true label ``i % 10``, served
    ``i % 10`` except on every 10th request (wrong); the first ten are labelled uniformly."""
    images = np.zeros((n, 1, 4, 4), np.float32)
    images[:, 0, 0, 0] = np.arange(n) % 10
    served = [(i % 10) if i % 10 else 9 for i in range(n)]
    samples = [Sample(f"r{i:03d}", 5.0 * i / n, 3, RouteKind.SERVING, served[i], images[i])
               for i in range(n)]  # fmt: skip
    site.samples.append("d", samples, Retention(), now=5.0)
    site.samples.label_many("d", [(f"r{i:03d}", i % 10) for i in range(10)], GOLDEN, 5.0)


def _predict(number: int, images: np.ndarray) -> np.ndarray:
    """v1 is always right; v2 is wrong on a third of the requests."""
    truth = images[:, 0, 0, 0].astype(np.int64)
    if number == 1:
        return truth
    return np.where(np.arange(len(truth)) % 3 == 0, (truth + 1) % 10, truth)


def test_the_census_labels_every_disagreement_and_only_those(tmp_path: Any) -> None:
    site = _Site(tmp_path)
    _fill(site, 100)
    census = take_census(site, _deployment(), WINDOW, [1], _predict, now=6.0)
    # v1 is right wherever the served answer was wrong (every 10th request: 10 of them)
    assert census == {1: Census(1, agree=90, kept_only=10, served_only=0, both_wrong=0)}
    assert site.asked == 9  # request r000 was labelled already (uniformly)
    sources = site.samples.label_sources("d")
    assert sources == {GOLDEN: 10, GOLDEN_DISCORDANT: 9}


def test_a_version_whose_disagreements_overrun_the_cap_is_left_to_the_uniform_labels(
    tmp_path: Any,
) -> None:
    site = _Site(tmp_path)
    _fill(site, 3 * CENSUS_CAP)
    census = take_census(site, _deployment(), WINDOW, [2, 1], _predict, now=6.0)
    assert set(census) == {1} and site.asked <= CENSUS_CAP


@pytest.mark.parametrize("how", ["fails", "silent"])
def test_a_labeller_that_fails_or_has_nothing_leaves_the_uniform_labels_alone(
    tmp_path: Any, how: str
) -> None:
    site = _Site(tmp_path)
    _fill(site, 100)
    setattr(site, how, True)
    assert take_census(site, _deployment(), WINDOW, [1], _predict, now=6.0) == {}
    assert site.samples.label_sources("d") == {GOLDEN: 10}


def _canary_window(site: _Site, n: int) -> None:
    """``n`` requests in [0, 5): every 4th answered by the canary v4 (right, as v1 would),
    the rest by the serving v3 (wrong on every 10th, as :func:`_fill`); none labelled."""
    images = np.zeros((n, 1, 4, 4), np.float32)
    images[:, 0, 0, 0] = np.arange(n) % 10
    samples = []
    for i in range(n):
        canary = i % 4 == 0
        answer = i % 10 if canary or i % 10 else 9
        route = RouteKind.CANARY if canary else RouteKind.SERVING
        samples.append(Sample(f"r{i:03d}", 5.0 * i / n, 4 if canary else 3, route, answer,
                              images[i]))  # fmt: skip
    site.samples.append("d", samples, Retention(), now=5.0)


def _canary_predict(number: int, images: np.ndarray) -> np.ndarray:
    """The serving v3 in the shadow: wrong on the first of every ten classes; the canary v4
    always right."""
    truth = images[:, 0, 0, 0].astype(np.int64)
    return np.where(truth == 0, 9, truth) if number == 3 else truth


def test_the_canarys_census_covers_both_shares_and_labels_only_their_disagreements(
    tmp_path: Any,
) -> None:
    """A canary right where the serving version is wrong on every 10th request: the census
    sees all ten disagreements of the window (on both shares, each version as it answered or
    in the shadow), labels those ten only, and the table over the window is decided where a
    few uniform labels would not be."""
    import dataclasses

    site = _Site(tmp_path)
    _canary_window(site, 100)
    deployment = dataclasses.replace(_deployment(), canary_version=4,
                                     status=DeploymentStatus.CANARY)  # fmt: skip
    census = take_canary_census(site, deployment, WINDOW, _canary_predict, now=6.0)
    assert census == Census(4, agree=90, kept_only=10, served_only=0, both_wrong=0)
    assert site.asked == 10 and site.samples.label_sources("d") == {GOLDEN_DISCORDANT: 10}
    uniform = paired_from_counts(18, 1, 0, 1, 0.95)
    assert uniform.low <= 0.0
    assert with_census(uniform, census).low > 0.0
    # no canary, or more disagreements than the cap: nothing labelled, the uniform decide
    assert take_canary_census(site, _deployment(), WINDOW, _canary_predict, now=6.0) is None
    crowded = _Site(tmp_path / "crowded")
    _canary_window(crowded, 20 * CENSUS_CAP)
    assert take_canary_census(crowded, deployment, WINDOW, _canary_predict, now=6.0) is None
    assert crowded.asked == 0


def test_the_kept_versions_scored_are_those_whose_data_looked_like_the_window() -> None:
    """A condition that comes back looks as it did: the kept versions scored are the four
    whose training data's drift severity is nearest the window's, an upload (no
    description) last; the serving and the rejected ones never."""
    from deepedge.controlplane.records import DATA_SEVERITY, ModelVersion
    from deepedge.controlplane.window_scores import MAX_KEPT_SCORED, kept_versions

    def version(n: int, severity: float | None, status: VersionStatus = VersionStatus.RETIRED
                ) -> ModelVersion:  # fmt: skip
        metrics = {} if severity is None else {DATA_SEVERITY: severity}
        return ModelVersion(DeploymentId("d"), n, None, None, status, None, (), metrics, "",
                            0, 0.0, 0.0)  # fmt: skip

    versions = {1: version(1, 0.0), 2: version(2, 0.9), 3: version(3, 0.05), 4: version(4, None),
                5: version(5, 0.95), 6: version(6, 0.0, VersionStatus.REJECTED),
                7: version(7, 1.0), 8: version(8, 0.1, VersionStatus.SERVING)}  # fmt: skip
    assert MAX_KEPT_SCORED == 4
    assert kept_versions(versions, 8, severity=0.02) == [1, 3, 2, 5]
    assert kept_versions(versions, 8, severity=0.97) == [5, 7, 2, 3]
    assert kept_versions({n: versions[n] for n in (1, 4, 5)}, 8, severity=0.9) == [5, 1, 4]


def test_a_version_is_described_by_the_severity_of_its_data() -> None:
    from deepedge.controlplane.records import TriggerKind, WindowPoint
    from deepedge.controlplane.recurring import data_severity

    history = [WindowPoint(w, 0.0, 0.0, 1, 0.9, None, None, None, None, 30, TriggerKind.NONE,
                           severity) for w, severity in ((3, 0.2), (4, 0.6))]  # fmt: skip
    assert data_severity(history, (3, 4, 5), current=1.0) == pytest.approx(0.6)
    assert data_severity(history, (), current=0.7) == 0.7
