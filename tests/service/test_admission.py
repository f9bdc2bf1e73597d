"""Admission, pure: FIFO per tenant within jobs, cores and GPUs of its quota."""

from __future__ import annotations

from deepedge.service.admission import Held, Queued, Quota, admit

QUOTA = Quota(max_active_jobs=3, max_cores=4.0, max_gpus=1)


def test_the_oldest_jobs_that_fit_are_admitted() -> None:
    verdict = admit(Held(0, 0.0, 0), QUOTA, [Queued("a", 1.0, 0), Queued("b", 2.0, 1)])
    assert verdict.admitted == ("a", "b") and not verdict.saturated


def test_a_job_that_does_not_fit_stops_the_tenant_fifo() -> None:
    queued = [Queued("big", 3.5, 0), Queued("small", 0.5, 0)]
    verdict = admit(Held(1, 1.0, 0), QUOTA, queued)
    assert verdict.admitted == () and verdict.saturated  # the small one never overtakes


def test_serving_cores_held_count_against_the_same_quota() -> None:
    verdict = admit(Held(0, 3.5, 0), QUOTA, [Queued("a", 1.0, 0)])
    assert verdict.admitted == () and verdict.saturated


def test_gpus_and_job_count_bound_admission() -> None:
    assert admit(Held(0, 0.0, 1), QUOTA, [Queued("g", 0.5, 1)]).admitted == ()
    full = admit(Held(2, 0.0, 0), QUOTA, [Queued("a", 0.5, 0), Queued("b", 0.5, 0)])
    assert full.admitted == ("a",) and full.saturated


def test_a_core_sum_within_float_error_fits() -> None:
    queued = [Queued(str(i), 0.1, 0) for i in range(3)]
    assert admit(Held(0, 3.7, 0), Quota(10, 4.0, 0), queued).admitted == ("0", "1", "2")
