"""Tokens of the two tenants the API tests create."""

from __future__ import annotations

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}
