"""The web side: the agents' JSON API, the owner API, the owner's page and the health check."""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask, Response, abort, g, jsonify, request, send_from_directory
from flask.json.provider import DefaultJSONProvider
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.sansio.response import Response as SansIOResponse

from oar.core import defaults, metrics, tracing
from oar.core.config import Config, check
from oar.core.db import database, open_database
from oar.core.errors import ActionError, http_error
from oar.core.failures import unexpected
from oar.core.fields import unstorable_text
from oar.core.runtime import Runtime
from oar.owner.bootstrap import refuse_newer_schema
from oar.web import flask_internals

log = logging.getLogger(__name__)


class RelayJSONProvider(DefaultJSONProvider):
    """Flask's JSON, with text kept as it is (not escaped to ASCII) and keys in the order written.

    Answers (compact JSON) are written by orjson: the same text as the standard library's for
    every answer the relay makes (strings, integers, plain floats, lists, objects; a float in
    exponent form reads `1e-8` instead of `1e-08`), in a tenth of the time, which was a tenth
    of a read's cost (docs/benchmarks.md#reads-at-the-stacks-ceiling). Dates, dataclasses and
    whatever orjson declines go through Flask's own rules as before.
    """

    ensure_ascii = False
    sort_keys = False

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        if kwargs == COMPACT:
            compact = _orjson_dumps(obj, self.default)
            if compact is not None:
                return compact.decode()
        return self._standard_dumps(obj, **kwargs)

    def _standard_dumps(self, obj: Any, **kwargs: Any) -> str:
        """The standard library's text. A refusal may quote what the request sent, and a lone
        surrogate there (`\\ud800`, which JSON may carry but UTF-8 cannot) is then written as
        its JSON escape, as ASCII-only text writes it, so that the answer can be sent at all."""
        text = super().dumps(obj, **kwargs)
        if _encodable(text):
            return text
        return super().dumps(obj, **{**kwargs, "ensure_ascii": True})

    def response(self, *args: Any, **kwargs: Any) -> SansIOResponse:
        """`jsonify`: Flask's, with orjson's bytes kept as bytes (not decoded to be encoded again)."""
        if self.compact is False or (self.compact is None and flask_internals.app_of(self).debug):
            return super().response(*args, **kwargs)
        body = self.answer_bytes(flask_internals.response_value(self, args, kwargs))
        return flask_internals.app_of(self).response_class(body, mimetype=self.mimetype)

    def answer_bytes(self, obj: Any) -> bytes:
        """An answer's body as `jsonify` writes it: compact JSON and a newline."""
        compact = _orjson_dumps(obj, self.default)
        return compact + b"\n" if compact is not None else f"{self._standard_dumps(obj, **COMPACT)}\n".encode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Request bodies: orjson where it reads the text as the standard library would, which
        is every body but those it refuses (they go to the standard library, as before: NaN, a
        byte-order mark, UTF-8-encoded surrogates, nesting deeper than 1,024) and those with a
        run of 19 digits (orjson reads an integer beyond 64 bits as a float)."""
        if not kwargs and not _has_long_digits(s):
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                pass
        return super().loads(s, **kwargs)


def _encodable(text: str) -> bool:
    """Whether `text` can be sent as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _has_long_digits(text: str | bytes) -> bool:
    return bool(_LONG_DIGITS.search(text) if isinstance(text, bytes) else _LONG_DIGITS_TEXT.search(text))


def _orjson_dumps(obj: Any, default: Callable[[Any], Any]) -> bytes | None:
    try:
        return orjson.dumps(obj, default=default, option=ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return None  # e.g. an integer beyond 64 bits, a lone surrogate: the standard library decides


COMPACT = {"separators": (",", ":")}
# A WSGI application: what Flask's `wsgi_app` is, and what wraps it.
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# The methods a request's count is labelled with; any other is counted as "other".
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LONG_DIGITS, _LONG_DIGITS_TEXT = re.compile(rb"[0-9]{19}"), re.compile(r"[0-9]{19}")
ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class TrustedProxies:
    """X-Forwarded-For and X-Forwarded-Proto, believed only from the proxies OAR_TRUST_PROXY counts.

    Without it anyone could claim https or another address; with it, a page served through a
    TLS proxy gets Secure cookies and failed sign-ins are counted per real client address
    (docs/operations.md#behind-a-proxy). The setting is read per request.
    """

    def __init__(self, app: Flask, direct: WSGIApp) -> None:
        self.app = app
        self.direct = direct

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        hops = self.app.extensions["oar"].config.trust_proxy
        if hops:
            return ProxyFix(self.direct, x_for=hops, x_proto=hops, x_host=0, x_port=0, x_prefix=0)(environ, start_response)
        return self.direct(environ, start_response)


def create_app(config: Config) -> Flask:
    """The relay's web app for `config`: its entry points (`wsgi.py`, the tests) say which relay,
    nothing here reads the environment. It binds this process's database (`oar.core.db`)."""
    check(config)
    app = Flask(__name__)
    # A prompt is at most 100,000 characters; 4 bytes each at most, plus the rest.
    app.config["MAX_CONTENT_LENGTH"] = defaults.MAX_PROMPT_CHARS * 4 + 64 * 1024
    app.json = RelayJSONProvider(app)
    open_database(config)
    refuse_newer_schema()  # raises NewerSchema: a web older than the database serves nothing
    app.extensions["oar"] = Runtime(config)
    from oar.web.call_lane import CallLane  # it imports the API's module, which imports this package

    # Agents' ordinary calls are answered in front of Flask's request machinery (oar/web/call_lane.py).
    app.wsgi_app = TrustedProxies(app, CallLane(app, app.wsgi_app))  # type: ignore[method-assign]
    # Figures and traces, when configured (docs/operations.md#watching-it): nothing otherwise.
    metrics.start("web", config)
    tracing.start("web", app.extensions["oar"])
    if metrics.on():
        count_requests(app)
    _install_request_hooks(app)
    _install_error_handlers(app)
    _register_blueprints(app, config)
    return app


def _install_request_hooks(app: Flask) -> None:
    """A database connection per request, ids that name nothing refused, Retry-After on 429 and 503."""

    @app.before_request
    def connect() -> None:
        # The health check connects itself: a database that is down is what it reports.
        if request.endpoint not in ("health.healthz", "health.readyz"):
            database.connect(reuse_if_open=True)

    @app.url_value_preprocessor
    def storable_ids(_endpoint: str | None, values: dict[str, Any] | None) -> None:
        """An id in the path holding a NUL or a lone surrogate names nothing (and PostgreSQL cannot
        even look it up): 404 on every route, the API's and the page's alike (docs/errors.md)."""
        if values and unstorable_text(values):
            abort(404)

    @app.teardown_request
    def close(_error: BaseException | None) -> None:
        if not database.is_closed():
            database.close()

    app.after_request(add_retry_after)

    @app.get("/favicon.ico")
    def favicon() -> ResponseReturnValue:
        # Browsers ask for it on every page without a <link rel="icon">; no sign-in needed for an icon.
        return send_from_directory(app.static_folder or "static", "favicon.ico", max_age=defaults.FAVICON_MAX_AGE_SECONDS)


def add_retry_after(response: Response) -> Response:
    """429 and 503 answers say when to come back in the body; HTTP clients read the header."""
    if response.status_code in (429, 503) and response.is_json:
        wait = retry_after(response.status_code, response.get_json(silent=True))
        if wait is not None:
            response.headers["Retry-After"] = wait
    return response


def retry_after(status: int, body: Any) -> str | None:
    """The Retry-After header of an answer: a 429 or 503 whose body says when to come back."""
    wait = body.get("retryAfterSeconds") if status in (429, 503) and isinstance(body, dict) else None
    return str(max(1, math.ceil(wait))) if isinstance(wait, int | float) and not isinstance(wait, bool) else None


def api_refusal(error: HTTPException) -> ActionError:
    """An HTTP error werkzeug raised (a wrong method, a body too large or too slow), as the API answers it."""
    return http_error(error.code or 500, f"{error.name}: {error.description} Nothing was done.")


def _install_error_handlers(app: Flask) -> None:
    """Every error becomes an ActionError, answered by `action_error`: the documented JSON shape
    (docs/errors.md), or the page's error page for the page's paths."""
    from oar.web import page  # the page's module imports this package's helpers

    @app.errorhandler(ActionError)
    def action_error(error: ActionError) -> ResponseReturnValue:
        if page.is_page_request():
            return page.error_page(error.status, error.message, error.code)
        return jsonify(error.to_dict()), error.status

    @app.errorhandler(HTTPException)
    def http_exception(error: HTTPException) -> ResponseReturnValue:
        if page.is_page_request():
            return action_error(page.http_refusal(error))
        return action_error(api_refusal(error))

    @app.errorhandler(Exception)
    def internal_error(error: Exception) -> ResponseReturnValue:
        return action_error(unexpected(error, f"request {request.method} {request.path}", log))


def _register_blueprints(app: Flask, config: Config) -> None:
    # Imported here, not at the top: each blueprint's module imports this package's helpers.
    from oar.web import (
        api,
        decide,
        external,
        health,
        mcp,
        mcp_team,
        openapi,
        openclaw,
        owner,
        owner_log,
        owner_relays,
        page,
        page_live,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_notify,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_openclaw,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_relays,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_settings,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_team,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        page_tokens,  # noqa: F401  (its routes are on the page's blueprint, registered with it)
        peer,
    )

    owner_log.install(app)
    for blueprint in (page.blueprint, decide.blueprint, api.blueprint, owner.blueprint, owner_relays.blueprint,
                      peer.blueprint, external.blueprint, health.blueprint, mcp.blueprint, mcp_team.blueprint,
                      openclaw.blueprint, openapi.blueprint):
        app.register_blueprint(blueprint)
    if config.metrics_on:
        # Only where metrics are on: prometheus-client is imported with it (off, /metrics is a 404).
        from oar.web import metrics_page

        app.register_blueprint(metrics_page.blueprint)


def count_requests(app: Flask) -> None:
    """Each request's route template, method, status and duration (`metrics.request_answered`):
    the template, never the path, so that no id or name a path holds becomes a label."""

    @app.before_request
    def started() -> None:
        g.oar_request_started = time.perf_counter()

    @app.after_request
    def answered(response: Response) -> Response:
        started_at = g.get("oar_request_started")
        if started_at is not None:
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            method = request.method if request.method in HTTP_METHODS else "other"  # any word a client sends is not a label
            metrics.request_answered(route, method, response.status_code, time.perf_counter() - started_at)
        return response


def runtime() -> Runtime:
    from flask import current_app

    return current_app.extensions["oar"]
