"""Signing in to the owner's page: the session cookie, its secret key, sign-ins, CSRF tokens.

The page uses Flask's signed cookie session. Its secret key is random (`secrets`),
generated once and kept in the `setting` table, so every web process of the relay shares
it and sign-ins survive restarts; it is never derived from the owner token. The cookie
carries a sign-in id that must name a current row of the `sign_in` table
(`oar.owner.signins`): signing out deletes it, so a copied cookie opens nothing afterwards.
It also carries a fingerprint of the owner token, so replacing the owner token
(`oar token --owner`) signs every browser out. Wrong owner tokens are counted per client
address (docs/owner-api.md#signing-in).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from datetime import timedelta

from flask import Flask, Request, abort, g, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from oar.core import defaults
from oar.core.config import Config
from oar.core.db import database
from oar.core.ratelimit import FailureLimiter
from oar.owner import signins
from oar.web import runtime
from oar.web.auth import owner_token_hash

SECRET_KEY_SETTING = "page_secret_key"
COOKIE_NAME = "oar_page"
# The cookie lasts as long as a sign-in may (renewed on every page); the server decides.
SIGN_IN_LIFETIME = timedelta(seconds=defaults.SIGN_IN_LIFETIME_SECONDS)
SIGN_IN_KEY = "signin"
CSRF_FIELD = "csrf_token"
# Paths that answer JSON for machines: no page cookie is read or written there.
API_PREFIXES = ("/api/", "/mcp", "/healthz", "/readyz", "/metrics")

_key_lock = threading.Lock()


def is_page_path(path: str) -> bool:
    return not path.startswith(API_PREFIXES)


def load_secret_key() -> str:
    """The page's signing key: read from the database, or generated and stored once."""
    with database.connection_context():
        return signins.stored_secret(SECRET_KEY_SETTING)


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
    """Whether this browser is signed in: its cookie names a current sign-in of the current
    owner token. Asked several times a request; looked up once."""
    if "oar_signed_in" not in g:
        g.oar_signed_in = _current_sign_in(config)
    return bool(g.oar_signed_in)


def _current_sign_in(config: Config) -> bool:
    mark, sign_in_id = session.get("owner"), session.get(SIGN_IN_KEY)
    owner_hash = owner_token_hash(config)
    if not (mark and sign_in_id and owner_hash):
        return False
    if not hmac.compare_digest(str(mark), _owner_fingerprint(owner_hash)):
        return False
    return signins.is_current(str(sign_in_id))


def sign_in(config: Config) -> None:
    """Start a fresh signed-in session (a new CSRF token too: nothing from before carries over)."""
    session.clear()
    session.permanent = True
    session["owner"] = _owner_fingerprint(owner_token_hash(config) or "")
    session[SIGN_IN_KEY] = signins.begin()
    session[CSRF_FIELD] = secrets.token_urlsafe(32)
    g.oar_signed_in = True


def sign_out() -> None:
    """End this browser's sign-in on the server, then forget the cookie."""
    sign_in_id = session.get(SIGN_IN_KEY)
    if sign_in_id:
        signins.end(str(sign_in_id))
    session.clear()
    g.oar_signed_in = False


def sign_out_everywhere() -> int:
    """End every sign-in, this browser's too; how many there were."""
    ended = signins.end_all()
    session.clear()
    g.oar_signed_in = False
    return ended


def _failures() -> FailureLimiter:
    relay = runtime()
    return FailureLimiter(relay.redis, relay.config.namespace, allowed=defaults.SIGN_IN_FAILURES_ALLOWED,
                          window=defaults.SIGN_IN_FAILURE_WINDOW_SECONDS)


def client_address() -> str:
    """The caller's address (the proxy's client when OAR_TRUST_PROXY says to believe it)."""
    return request.remote_addr or "unknown"


def sign_in_wait() -> int | None:
    """Seconds this address must wait before its next try, after too many wrong tokens."""
    return _failures().retry_after(client_address())


def sign_in_failed() -> None:
    _failures().record_failure(client_address())


def sign_in_succeeded() -> None:
    _failures().forget(client_address())


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


