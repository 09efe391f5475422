"""Random identifiers and tokens. Tokens are stored only as their SHA-256 hash."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from oar.core import defaults


def session_id() -> str:
    """64 random bits as hex: url-safe, and its first 8 characters are its short form."""
    return secrets.token_hex(defaults.SESSION_ID_BYTES)


def prefixed_id(prefix: str) -> str:
    """`grp_3f9c2a1e7b04`-style ids (48 random bits after the kind prefix)."""
    return f"{prefix}_{secrets.token_hex(6)}"


def message_id() -> str:
    return f"msg_{secrets.token_hex(8)}"


def new_token(kind: str) -> str:
    """A bearer token: 256 random bits, url-safe, prefixed by its kind for humans."""
    return f"oar_{kind}_{secrets.token_urlsafe(defaults.TOKEN_BYTES)}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_hash(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_token(token), stored_hash)


def short(identifier: str) -> str:
    return identifier[: defaults.SHORT_ID_CHARS]
