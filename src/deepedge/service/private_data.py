"""The parts of the service's data folder that hold tenants' data, kept to the service's
own user: folders 0700, files 0600 (as the tokens are).

==========================  ===============================================================
``deployments/``            every version of every tenant's models (artifacts, exports,
                            uploads: :func:`~deepedge.controlplane.artifacts.deployment_dir`)
``samples/``                the sample store: every tenant's raw inputs and labels
                            (:mod:`~deepedge.dataplane.sample_store`, which also makes its
                            own file 0600 when it opens it)
``serving/``                the journal of serving decisions: tenants' model names and the
                            nodes they run on (:mod:`~deepedge.dataplane.serving_decisions`)
the job store's SQLite file  tenants, token digests, jobs, deployments, their events (and its
                            ``-wal``/``-shm``); a PostgreSQL store is the database's to guard
==========================  ===============================================================

A folder's mode guards the files in it whatever their own modes, so a file written inside
one at the umask's 0644 stays out of other users' reach. :func:`protect` runs when the
service starts (its API's lifespan) and narrows what an older deepedge made wider; the
modules that create these folders create them private too. The jobs' folders are not here:
their tenant's sandbox user owns part of them (:mod:`deepedge.service.workspace`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from deepedge.core.durable import private_folder
from deepedge.dataplane.sample_store import SAMPLES_FILE
from deepedge.dataplane.serving_decisions import DECISIONS_FILE

DEPLOYMENTS = Path("deployments")  # (artifacts.deployment_dir's root)
FOLDERS = (DEPLOYMENTS, SAMPLES_FILE.parent, DECISIONS_FILE.parent)
FOLDER_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SIDE_FILES = ("", "-wal", "-shm", ".writelock")


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` store URL (None: another database, or in memory)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///")
    return Path(path) if path and path != ":memory:" else None


def protect(data_dir: Path, store_url: str | None = None) -> list[Path]:
    """Make the tenant-data folders of ``data_dir`` private (created when missing) and the
    store's SQLite files, when there are any, 0600; returns the paths it made private."""
    done = [private_folder(Path(data_dir) / folder, FOLDER_MODE) for folder in FOLDERS]
    database = sqlite_path(store_url) if store_url else None
    if database is not None:
        for suffix in SQLITE_SIDE_FILES:
            path = database.with_name(database.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                os.chmod(path, FILE_MODE)
                done.append(path)
    return done
