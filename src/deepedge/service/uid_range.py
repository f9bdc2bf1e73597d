"""A service's range of sandbox uids, claimed on the host so no two services share one.

Tenant code runs as a uid of its tenant's (:mod:`deepedge.service.sandbox`), and the kernel
counts per uid host-wide: ``RLIMIT_NPROC``, the processes a job may have, counts every
process of that uid on the machine. Services that numbered their tenants from the same
first uid gave two services' first tenants one uid, and one tenant's job failed to start
("setpriv: failed to execute /bin/sh: Resource temporarily unavailable") because the other
service's tenant ran processes. So:

* **each store records its range** (``sandbox_uids``: first uid and size): its tenants'
  uids are given from it in creation order (:func:`deepedge.service.tenants.insert_tenant`);
* **the host keeps one claim per range** in a host-wide folder (:data:`DEFAULT_CLAIMS_DIR`,
  persistent like the stores; ``DEEPEDGE_UID_CLAIMS_DIR`` or the service's settings move
  it): a small JSON file naming the range and the data folder that holds it, written under
  a lock on the folder (``.lock``, ``flock``);
* **a claim is live while its data folder exists** (a deleted data folder frees its range);
* **at start** (:func:`claim_uid_range`, before ``deepedge serve`` binds its port, and
  wherever tenants are created) a store without a range takes the lowest one no live claim
  overlaps; a store whose range another live data folder claims is refused with
  :class:`~deepedge.core.errors.UidRangeClaimedError` when it has tenants (their files
  carry those uids) and moves to a free range when it has none.

Stores made before ranges existed keep their tenants' uids: migration 0009 records the
range they were numbered in (from :data:`FIRST_UID`). A service that is not root runs its
sandboxes in a user namespace whose uids map to its own, so its ranges never reach the
host's accounting; where it cannot write the claims folder it records a range unclaimed
(and says so in the log).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from deepedge.core.errors import DependencyUnavailableError, UidRangeClaimedError

log = logging.getLogger(__name__)

FIRST_UID = 200_000  # the first range's first uid (every store before ranges numbered from it)
RANGE_SIZE = 10_000  # tenants per service
LAST_UID = 2**31 - 2  # the highest uid a range may hold (uid_t's -1 and signed readers)
DEFAULT_CLAIMS_DIR = Path("/var/lib/deepedge/uid-ranges")
CLAIMS_DIR_ENV = "DEEPEDGE_UID_CLAIMS_DIR"
LOCK_NAME = ".lock"


def default_claims_dir() -> Path:
    """The host-wide claims folder: ``$DEEPEDGE_UID_CLAIMS_DIR``, else the default."""
    return Path(os.environ.get(CLAIMS_DIR_ENV) or DEFAULT_CLAIMS_DIR)


@dataclass(frozen=True, order=True)
class UidRange:
    """The uids ``first`` .. ``first + size - 1``."""

    first: int
    size: int = RANGE_SIZE

    @property
    def last(self) -> int:
        return self.first + self.size - 1

    def overlaps(self, other: UidRange) -> bool:
        return self.first <= other.last and other.first <= self.last

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


class UidLedger(Protocol):
    """Where a store keeps its range (:class:`deepedge.service.tenants.Tenancy`)."""

    def uid_range(self) -> UidRange | None: ...

    def uid_span(self) -> tuple[int, int] | None: ...

    def record_uid_range(self, uids: UidRange) -> None: ...


@dataclass(frozen=True)
class Claim:
    """One range claimed on the host, by one data folder."""

    range: UidRange
    data_dir: Path
    claimed_at: float

    def live(self) -> bool:
        return self.data_dir.is_dir()

    def document(self) -> dict[str, object]:
        return {"first": self.range.first, "size": self.range.size,
                "data_dir": str(self.data_dir), "claimed_at": self.claimed_at}  # fmt: skip


def covering(uids: tuple[int, int]) -> UidRange:
    """The range a store without one has been numbering in: from :data:`FIRST_UID` (every
    store before ranges) to its highest uid, at least :data:`RANGE_SIZE` long."""
    low, high = uids
    first = FIRST_UID if low >= FIRST_UID else low
    return UidRange(first, max(RANGE_SIZE, high - first + 1))


def lowest_free(taken: Sequence[UidRange], size: int = RANGE_SIZE) -> UidRange:
    """The lowest range ``FIRST_UID + k * size`` that overlaps none of ``taken``."""
    first = FIRST_UID
    for other in sorted(taken):
        candidate = UidRange(first, size)
        if candidate.overlaps(other):
            first = FIRST_UID + -(-(other.last + 1 - FIRST_UID) // size) * size
    if first + size - 1 > LAST_UID:
        raise DependencyUnavailableError("no free range of sandbox uids is left on this host")
    return UidRange(first, size)


def decide(
    recorded: UidRange | None, uids: tuple[int, int] | None, others: Sequence[Claim]
) -> UidRange:
    """The range a store is to hold, given what it recorded, its tenants' lowest and highest
    uids (None: no tenant) and the live claims of other data folders (module docstring)."""
    mine = recorded if recorded is not None else (covering(uids) if uids else None)
    if mine is not None:
        clash = [c for c in others if c.range.overlaps(mine)]
        if not clash:
            return mine
        if uids is not None:
            raise UidRangeClaimedError(
                f"the sandbox uids {mine} of this service's tenants are claimed on this host "
                f"by the data folder {clash[0].data_dir} (another deepedge service): two "
                "services' tenants would share uids and their process limits; stop the "
                "other service, or move its data folder's tenants to another store, or delete "
                "the folder if it is left over",
                range=str(mine), claimed_by=str(clash[0].data_dir),
            )  # fmt: skip
    return lowest_free([c.range for c in others])


def read_claims(folder: Path) -> list[Claim]:
    claims = []
    for path in sorted(folder.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
            claims.append(Claim(UidRange(int(raw["first"]), int(raw["size"])),
                                Path(raw["data_dir"]), float(raw["claimed_at"])))  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("ignoring the unreadable uid claim %s", path)
    return claims


def claim_file(folder: Path, uids: UidRange) -> Path:
    return folder / f"{uids.first}.json"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    with open(folder / LOCK_NAME, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _write_claim(folder: Path, claim: Claim) -> None:
    path = claim_file(folder, claim.range)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(claim.document()))
    os.replace(tmp, path)


def claim_uid_range(store: UidLedger, data_dir: Path, folder: Path | None = None) -> UidRange:
    """Record and claim the range of ``store`` (a store's :class:`Tenancy`) on this host
    (module docstring); returns it.

    Raises :class:`UidRangeClaimedError` when another live data folder claims the range of a
    store that has tenants."""
    folder = default_claims_dir() if folder is None else folder
    data_dir = data_dir.absolute()
    try:
        with _locked(folder):
            others = [c for c in read_claims(folder) if c.data_dir != data_dir and c.live()]
            chosen = _record(store, others)
            for mine in read_claims(folder):  # a range this folder held before: freed
                if mine.data_dir == data_dir and mine.range != chosen:
                    claim_file(folder, mine.range).unlink(missing_ok=True)
            _write_claim(folder, Claim(chosen, data_dir, time.time()))
            return chosen
    except PermissionError as exc:
        if os.geteuid() == 0:
            raise DependencyUnavailableError(
                f"cannot claim sandbox uids in {folder}: {exc}", field="uid_claims_dir"
            ) from exc
        chosen = _record(store, [])
        log.warning("sandbox uids %s recorded but not claimed on the host (%s); a service "
                    "that is not root maps them to its own uid", chosen, exc)  # fmt: skip
        return chosen


def _record(store: UidLedger, others: Sequence[Claim]) -> UidRange:
    recorded = store.uid_range()
    chosen = decide(recorded, store.uid_span(), others)
    if chosen != recorded:
        store.record_uid_range(chosen)
        log.info("this service's sandbox uids: %s", chosen)
    return chosen
