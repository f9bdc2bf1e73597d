"""Tokens of the two tenants the API tests create, and the operator's; what the browser
tests ask a page (its elements wider than the window)."""

from __future__ import annotations

from typing import Any

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


def operator(client: Any) -> dict[str, str]:
    """An operator token of the client's service (minted in its store)."""
    from deepedge.service.tenants import TokenRole

    store = client.app.state.service.store
    _, secret = store.tenancy.create_token(TokenRole.OPERATOR, tenant_id=None, label="test")
    return {"Authorization": f"Bearer {secret}"}


# [scrollWidth, clientWidth, up to 5 elements reaching past the window] of the page shown
OVERFLOW = """
const width = document.documentElement.clientWidth;
const out = [];
for (const e of document.querySelectorAll('body *')) {
  const r = e.getBoundingClientRect();
  if (r.width && r.right > width + 0.5 && !e.closest('[hidden]')) out.push(e.tagName + '#' + e.id +
    '.' + e.className + ' ' + Math.round(r.right));
}
return [document.documentElement.scrollWidth, width, out.slice(0, 5)];
"""
