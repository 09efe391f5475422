"""Bearer tokens: agent tokens name the calling conversation; the owner token the owner."""

from __future__ import annotations

from flask import request

from oar.core import ids, settings
from oar.core.config import Config
from oar.core.errors import ActionError
from oar.sessions import sessions
from oar.sessions.sessions import Session


def bearer_token() -> str | None:
    return token_in(request.headers.get("Authorization"))


def token_in(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for any other header or none."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def unauthorized(message: str) -> ActionError:
    return ActionError("REMOTE_RELAY_UNAUTHORIZED", message)


def require_agent() -> Session:
    return agent_of(bearer_token())


def agent_of(token: str | None) -> Session:
    """The conversation whose agent token this is, or the 401 that says why there is none."""
    if token is None:
        raise unauthorized("Send the session's agent token as Authorization: Bearer <token>. Nothing was done.")
    session = sessions.session_by_token(token)
    if session is None:
        raise unauthorized("That token is not a valid agent token on this relay. Nothing was done.")
    if session.archived:  # archiving ends the session's work, its agent's calls too (docs/sessions.md#archive)
        raise unauthorized(
            f"That agent token belongs to session {session.id[:8]}, which is archived: its tokens no longer work. "
            "Nothing was done."
        )
    return session


def require_owner(config: Config) -> None:
    token = bearer_token()
    if token is None:
        raise unauthorized("Send the owner token as Authorization: Bearer <token>. Nothing was done.")
    if not is_owner_token(config, token):
        raise unauthorized("That token is not the owner token of this relay. Nothing was done.")


def owner_token_hash(config: Config) -> str | None:
    """The owner token's hash: of OAR_OWNER_TOKEN, else the one stored when it was generated."""
    if config.owner_token:
        return ids.hash_token(config.owner_token)
    return settings.get_value(settings.OWNER_TOKEN_HASH_KEY) or None


def is_owner_token(config: Config, token: str) -> bool:
    """Whether `token` is the owner token (the API's bearer token, the page's sign-in)."""
    stored = owner_token_hash(config)
    if not stored:
        return False
    return ids.same_hash(token, stored)
