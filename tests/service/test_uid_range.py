"""Sandbox uids per service: each store's range, claimed on the host, never shared by two
live data folders; stores from before ranges keep their tenants' uids."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deepedge.core.errors import UidRangeClaimedError
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore
from deepedge.service.uid_range import (
    FIRST_UID,
    RANGE_SIZE,
    Claim,
    UidRange,
    claim_uid_range,
    decide,
    lowest_free,
    read_claims,
)


def _store(data_dir: Path) -> JobStore:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = JobStore(ServiceSettings(data_dir=data_dir).url)
    store.migrate()
    return store


def _claim(uids: UidRange, data_dir: Path) -> Claim:
    return Claim(uids, data_dir, 0.0)


R0, R1, R2 = (UidRange(FIRST_UID + k * RANGE_SIZE) for k in range(3))


@pytest.mark.parametrize(
    ("recorded", "uids", "others", "expected"),
    [
        (None, None, [], R0),  # a new store, an empty host: the first range
        (None, None, [R0], R1),  # the first range is another service's
        (None, None, [R0, R2], R1),  # the lowest gap
        (R2, None, [R0], R2),  # what it recorded, unclaimed: kept
        (R1, (R1.first, R1.first + 3), [R0, R2], R1),  # with tenants, its own: kept
        (R0, None, [R0], R1),  # no tenant yet, its range taken (a copied folder): moved
        (None, (FIRST_UID, FIRST_UID + 2), [R1], R0),  # before ranges: the uids it has
        (None, (FIRST_UID, FIRST_UID + 2), [R0], UidRangeClaimedError),  # ... taken: refused
        (R0, (FIRST_UID, FIRST_UID), [UidRange(FIRST_UID + 5, 3)], UidRangeClaimedError),
        (None, (FIRST_UID, FIRST_UID + 12_000), [], UidRange(FIRST_UID, 12_001)),
    ],
)  # fmt: skip
def test_a_store_keeps_its_range_or_takes_the_lowest_free_one(
    recorded: UidRange | None,
    uids: tuple[int, int] | None,
    others: list[UidRange],
    expected: UidRange | type[Exception],
) -> None:
    claims = [_claim(r, Path(f"/srv/other-{n}")) for n, r in enumerate(others)]
    if isinstance(expected, UidRange):
        assert decide(recorded, uids, claims) == expected
    else:
        with pytest.raises(expected) as caught:
            decide(recorded, uids, claims)
        assert "/srv/other-0" in str(caught.value)


@given(st.lists(st.builds(UidRange, st.integers(FIRST_UID - 50_000, FIRST_UID + 200_000),
                          st.integers(1, 30_000)), max_size=8))  # fmt: skip
def test_the_lowest_free_range_overlaps_nothing_and_none_below_it_is_free(
    taken: list[UidRange],
) -> None:
    chosen = lowest_free(taken)
    assert (chosen.first - FIRST_UID) % RANGE_SIZE == 0 and chosen.size == RANGE_SIZE
    assert not any(chosen.overlaps(t) for t in taken)
    below = [UidRange(f) for f in range(FIRST_UID, chosen.first, RANGE_SIZE)]
    assert all(any(b.overlaps(t) for t in taken) for b in below)


def test_two_services_on_one_host_give_their_tenants_disjoint_uids(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    ranges, uids = [], []
    for name in ("site-a", "site-b"):
        settings = ServiceSettings(data_dir=tmp_path / name, uid_claims_dir=claims)
        store = _store(settings.data_dir)
        ranges.append(settings.claim_uids(store))
        uids.append([store.create_tenant(t, f"tok-{name}-{t}").uid for t in ("first", "second")])
        assert settings.claim_uids(store) == ranges[-1]  # a restart keeps it
        store.dispose()
    assert not ranges[0].overlaps(ranges[1])
    assert uids == [[ranges[0].first, ranges[0].first + 1], [ranges[1].first, ranges[1].first + 1]]
    assert {(c.range, c.data_dir.name) for c in read_claims(claims)} == {
        (ranges[0], "site-a"), (ranges[1], "site-b")}  # fmt: skip


def test_a_store_whose_uids_another_live_service_claims_is_refused(tmp_path: Path) -> None:
    """Two stores numbered from the same first uid before ranges existed (both have a
    tenant with uid 200000): the second to start is refused, naming the first's folder;
    once that folder is deleted, its claim is stale and the range is free."""
    claims = tmp_path / "claims"
    first, second = _store(tmp_path / "first"), _store(tmp_path / "second")
    for store in (first, second):
        assert store.create_tenant("t", "tok-t").uid == FIRST_UID
    assert claim_uid_range(first.tenancy, tmp_path / "first", claims).first == FIRST_UID
    with pytest.raises(UidRangeClaimedError) as refused:
        claim_uid_range(second.tenancy, tmp_path / "second", claims)
    assert refused.value.fields["claimed_by"] == str(tmp_path / "first")
    assert second.tenancy.uid_range() is None  # nothing recorded for the refused store
    first.dispose()
    shutil.rmtree(tmp_path / "first")
    assert claim_uid_range(second.tenancy, tmp_path / "second", claims).first == FIRST_UID
    second.dispose()


def test_the_service_refuses_to_start_on_a_claimed_range(tmp_path: Path) -> None:
    claims, data_dir = tmp_path / "claims", tmp_path / "data"
    store = _store(data_dir)
    store.create_tenant("t", "tok-t")
    store.dispose()
    (tmp_path / "other").mkdir()
    claims.mkdir()
    (claims / f"{FIRST_UID}.json").write_text(json.dumps(
        {"first": FIRST_UID, "size": RANGE_SIZE, "data_dir": str(tmp_path / "other"),
         "claimed_at": 0.0}))  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "deepedge.api.server", "--data-dir", str(data_dir),
         "--trusted-tenants", "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"DEEPEDGE_UID_CLAIMS_DIR": str(claims), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert f"sandbox uids {FIRST_UID}-{FIRST_UID + RANGE_SIZE - 1}" in done.stderr
    assert str(tmp_path / "other") in done.stderr


@pytest.mark.parametrize(("tenants", "recorded"), [(0, None), (3, UidRange(FIRST_UID))])
def test_stores_from_before_ranges_keep_their_tenants_uids(
    tmp_path: Path, tenants: int, recorded: UidRange | None
) -> None:
    from alembic import command
    from alembic.config import Config

    from deepedge.service.store import MIGRATIONS_DIR

    store = _store(tmp_path / "data")
    made = [store.create_tenant(f"t{n}", f"tok-{n}").uid for n in range(tenants)]
    with store._write_engine.connect() as conn:  # back to 0008, as an older service left it
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        config.attributes["connection"] = conn
        command.downgrade(config, "0008")
        conn.commit()
    store.dispose()
    store = _store(tmp_path / "data")
    assert store.tenancy.uid_range() == recorded
    assert made == list(range(FIRST_UID, FIRST_UID + tenants))
    claimed = claim_uid_range(store.tenancy, tmp_path / "data", tmp_path / "claims")
    assert claimed == (recorded or UidRange(FIRST_UID))
    assert store.create_tenant("late", "tok-late").uid == FIRST_UID + tenants
    store.dispose()
