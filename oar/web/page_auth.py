"""Signing in to the owner's page: the session cookie, its secret key, and CSRF tokens.

The page uses Flask's signed cookie session. Its secret key is random (`secrets`),
generated once and kept in the `setting` table, so every web process of the relay shares
it and sign-ins survive restarts; it is never derived from the owner token. The cookie
also carries a fingerprint of the owner token, so replacing the owner token
(`oar token --owner`) signs every browser out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from datetime import timedelta

from flask import Flask, Request, abort, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from oar.core import settings
from oar.core.config import Config
from oar.core.db import database, write_transaction
from oar.core.models import Setting
from oar.web.auth import owner_token_hash

SECRET_KEY_SETTING = "page_secret_key"
COOKIE_NAME = "oar_page"
# A sign-in lasts this long after the last visit (the cookie is renewed on every page).
SIGN_IN_LIFETIME = timedelta(days=14)
CSRF_FIELD = "csrf_token"
# Paths that answer JSON for machines: no page cookie is read or written there.
API_PREFIXES = ("/api/", "/mcp", "/healthz")

_key_lock = threading.Lock()


def is_page_path(path: str) -> bool:
    return not path.startswith(API_PREFIXES)


def load_secret_key() -> str:
    """The page's signing key: read from the database, or generated and stored once.

    Two processes starting at once both try to insert; the first insert wins and both read
    it back.
    """
    with database.connection_context():
        stored = settings.get_value(SECRET_KEY_SETTING)
        if not stored:
            with write_transaction():
                Setting.insert(key=SECRET_KEY_SETTING, value=secrets.token_urlsafe(48)).on_conflict_ignore().execute()
            stored = settings.get_value(SECRET_KEY_SETTING)
    return stored


class PageSessionInterface(SecureCookieSessionInterface):
    """The signed cookie session, only on page paths, with its key loaded on first use."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if not is_page_path(request.path):
            return None  # Flask then uses a null session that is never saved
        if not app.secret_key:
            with _key_lock:
                if not app.secret_key:
                    app.secret_key = load_secret_key()
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        """Secure whenever the page is served over https (directly, or as OAR_PUBLIC_URL says)."""
        config: Config = app.extensions["oar"].config
        return request.scheme == "https" or (config.public_url or "").startswith("https://")


def install(app: Flask) -> None:
    app.session_interface = PageSessionInterface()
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=SIGN_IN_LIFETIME,
    )


def _owner_fingerprint(owner_hash: str) -> str:
    from flask import current_app

    key = str(current_app.secret_key).encode()
    return hmac.new(key, owner_hash.encode(), hashlib.sha256).hexdigest()[:32]


def signed_in(config: Config) -> bool:
    mark = session.get("owner")
    owner_hash = owner_token_hash(config)
    if not (mark and owner_hash):
        return False
    return hmac.compare_digest(str(mark), _owner_fingerprint(owner_hash))


def sign_in(config: Config) -> None:
    """Start a fresh signed-in session (a new CSRF token too: nothing from before carries over)."""
    session.clear()
    session.permanent = True
    session["owner"] = _owner_fingerprint(owner_token_hash(config) or "")
    session[CSRF_FIELD] = secrets.token_urlsafe(32)


def sign_out() -> None:
    session.clear()


def csrf_token() -> str:
    """This browser's CSRF token, put into every form as a hidden field."""
    token = session.get(CSRF_FIELD)
    if not token:
        token = session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Every POST of the page carries the form's CSRF token; else 400 and nothing changes."""
    sent = request.form.get(CSRF_FIELD, "")
    expected = session.get(CSRF_FIELD, "")
    if not sent or not expected or not hmac.compare_digest(str(sent), str(expected)):
        abort(400, description="csrf")


