"""Tenant credentials: tokens are random, shown once, and stored only as SHA-256 digests.

A token carries 256 bits of entropy, so an unsalted digest cannot be brute-forced; the
lookup is by digest (indexed), and the comparison is done by the database on the digest,
never on the secret itself.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "dpe_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
