"""Tokens of the two tenants the API tests create, and the operator's."""

from __future__ import annotations

from typing import Any

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


def operator(client: Any) -> dict[str, str]:
    """An operator token of the client's service (minted in its store)."""
    from deepedge.service.tenants import TokenRole

    store = client.app.state.service.store
    _, secret = store.create_token(TokenRole.OPERATOR, tenant_id=None, label="test")
    return {"Authorization": f"Bearer {secret}"}
