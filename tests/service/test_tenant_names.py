"""A tenant's name is part of file names (its saved token, ``tokens/NAME.token``) and of its
models' names: a name that could leave the folder or break them is refused, in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepedge.core.errors import InvalidInputError
from deepedge.service.config import ServiceSettings
from deepedge.service.store import JobStore


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("alice", True),
        ("t-1.b_2", True),
        ("a" * 64, True),
        ("", False),
        (" ", False),
        ("../x", False),  # `tenants create ../x --save-token` wrote tokens/../x.token
        ("a/b", False),
        ("-a", False),
        ("a" * 65, False),
        ("ünï", False),
    ],
)
def test_tenant_names(tmp_path: Path, name: str, ok: bool) -> None:
    store = JobStore(ServiceSettings(data_dir=tmp_path).url)
    store.migrate()
    try:
        if ok:
            assert store.create_tenant(name, "dpe_tok").name == name
        else:
            with pytest.raises(InvalidInputError, match="tenant's name"):
                store.create_tenant(name, "dpe_tok")
            assert store.tenancy.all() == []
    finally:
        store.dispose()
