"""The web side: the agents' JSON API, the owner API, the owner's page and the health check."""

from __future__ import annotations

import logging
import secrets

from flask import Flask, jsonify, request
from flask.json.provider import DefaultJSONProvider
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from oar.core import defaults
from oar.core.config import Config, from_environment
from oar.core.db import database, open_database
from oar.core.errors import ActionError
from oar.core.runtime import Runtime

log = logging.getLogger(__name__)


class RelayJSONProvider(DefaultJSONProvider):
    """Flask's JSON, with text kept as it is (not escaped to ASCII) and keys in the order written."""

    ensure_ascii = False
    sort_keys = False


def create_app(config: Config | None = None) -> Flask:
    config = config or from_environment()
    app = Flask(__name__)
    # A prompt is at most 100,000 characters; 4 bytes each at most, plus the rest.
    app.config["MAX_CONTENT_LENGTH"] = defaults.MAX_PROMPT_CHARS * 4 + 64 * 1024
    app.json = RelayJSONProvider(app)
    open_database(config, pooled=True)
    app.extensions["oar"] = Runtime(config)

    @app.before_request
    def connect() -> None:
        database.connect(reuse_if_open=True)

    @app.teardown_request
    def close(_error: BaseException | None) -> None:
        if not database.is_closed():
            database.close()

    @app.errorhandler(ActionError)
    def action_error(error: ActionError) -> ResponseReturnValue:
        if page.is_page_request():
            return page.error_page(error.status, error.message)
        return jsonify(error.to_dict()), error.status

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> ResponseReturnValue:
        if page.is_page_request():
            return page.http_error_page(error)
        code = "REMOTE_RELAY_NOT_FOUND" if error.code == 404 else "REMOTE_RELAY_INVALID_INPUT"
        body = {"ok": False, "code": code, "error": f"{error.name}: {error.description} Nothing was done."}
        return jsonify(body), error.code or 500

    @app.errorhandler(Exception)
    def internal_error(error: Exception) -> ResponseReturnValue:
        reference = secrets.token_hex(4)
        log.exception("request %s %s failed (log reference %s)", request.method, request.path, reference)
        if page.is_page_request():
            return page.error_page(500, f"The relay failed (log reference {reference}). Its changes were rolled back.")
        body = {
            "ok": False,
            "code": "REMOTE_RELAY_INTERNAL",
            "error": f"The relay failed (log reference {reference}). Its changes were rolled back.",
        }
        return jsonify(body), 500

    from oar.web import api, external, health, mcp, openapi, owner, page

    app.register_blueprint(page.blueprint)
    app.register_blueprint(api.blueprint)
    app.register_blueprint(owner.blueprint)
    app.register_blueprint(external.blueprint)
    app.register_blueprint(health.blueprint)
    app.register_blueprint(mcp.blueprint)
    app.register_blueprint(openapi.blueprint)
    return app


def runtime() -> Runtime:
    from flask import current_app

    return current_app.extensions["oar"]
