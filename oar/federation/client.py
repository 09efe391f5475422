"""The one client that calls a paired relay (docs/relays.md#the-link).

Every call to another relay goes through `PeerLink.request`: a connect timeout, a read timeout
that covers the wait the call asked for, connection attempts retried a bounded number of times
(a connection never made sent nothing, so a retry cannot do a call twice; a request that reached
the peer is never sent again), no redirects followed, and an answer that is not the peer's JSON
turned into a clear error. It holds no database transaction: callers give back their connection
before they call (`release_connection`), and write what they learnt after.

Failures become the SPEC's codes: `REMOTE_RELAY_OFFLINE` (no answer), `REMOTE_RELAY_UNAUTHORIZED`
(the token was rejected; 502 here), the peer's own code when its answer carries one, and
`REMOTE_RELAY_HTTP_<n>` for any other answer.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from oar import __version__
from oar.core import defaults, tracing
from oar.core.db import release_connection
from oar.core.errors import STATUS_BY_CODE, ActionError, peer_http_status
from oar.core.fields import has_control_characters, one_line
from oar.core.numbers import read_whole

log = logging.getLogger(__name__)

API = "/api/peer/v1"
# Provenance of a call, as headers (docs/relays.md#the-link); text values are percent-encoded UTF-8.
HEADERS = {
    "relay": "X-OAR-Origin-Relay",
    "session": "X-OAR-Origin-Session",
    "session_title": "X-OAR-Origin-Title",
    "model": "X-OAR-Origin-Model",
    "mode": "X-OAR-Origin-Mode",
    "hops": "X-OAR-Hops",
    "acts_for_user": "X-OAR-Acts-For-User",
    "wait_seconds": "X-OAR-Wait-Seconds",
}
# The largest hop count and wait a call may say it carries: far above what a relay sends (hops
# past 2 need the owner's mention at each crossing; a wait is at most 86,400 s, `wait_seconds`'s range).
MAX_HOPS_SAID = 1000
MAX_WAIT_SAID = 86_400


@dataclass(frozen=True)
class Origin:
    """Who calls the peer: the calling conversation on this relay, and the hops its prompt will
    have made once it arrives (its own turn's, plus this crossing)."""

    relay: str
    session: str
    session_title: str
    model: str | None
    mode: str
    hops: int
    acts_for_user: bool = True
    # How long the caller can wait for the answer (the peer's waits and cards end before it).
    wait_seconds: int | None = None

    def headers(self) -> dict[str, str]:
        values: dict[str, Any] = {field: getattr(self, field) for field in HEADERS}
        return {
            HEADERS[field]: quote(str(value), safe="") if not isinstance(value, bool) else ("1" if value else "0")
            for field, value in values.items()
            if value is not None
        }

    @classmethod
    def from_headers(cls, headers: Any) -> Origin | None:
        """The provenance a call carries, or None when a required header is missing or any is
        wrong: text that is not percent-encoded UTF-8, a relay name, session id or mode holding a
        control character, a count that is not ASCII digits in range. A title or model with
        control characters is kept as one line (`one_line`): it is another relay's text."""
        try:
            relay, session = _header_text(headers, "relay", 200), _header_text(headers, "session", 64)
            title, model = _header_text(headers, "session_title", 200), _header_text(headers, "model", 200)
            mode = _header_text(headers, "mode", 8) or "agent"
        except UnicodeDecodeError:
            return None
        if not relay or not session or title is None or mode not in ("agent", "ask", "plan"):
            return None
        if has_control_characters(relay) or has_control_characters(session):
            return None
        hops = _header_count(headers, "hops", MAX_HOPS_SAID)
        wait_text = headers.get(HEADERS["wait_seconds"])
        wait_seconds = _header_count(headers, "wait_seconds", MAX_WAIT_SAID) if wait_text is not None else None
        if hops is None or (wait_text is not None and wait_seconds is None):
            return None
        return cls(
            relay=relay, session=session, session_title=one_line(title), model=one_line(model or "") or None,
            mode=mode, hops=hops, acts_for_user=headers.get(HEADERS["acts_for_user"], "1") != "0",
            wait_seconds=wait_seconds,
        )


def _header_text(headers: Any, field: str, limit: int) -> str | None:
    """A text header, percent-decoded as UTF-8 (a UnicodeDecodeError when it is not), cut to `limit`."""
    raw = headers.get(HEADERS[field])
    if raw is None:
        return None
    return unquote(raw, errors="strict")[:limit] if raw else ""


def _header_count(headers: Any, field: str, maximum: int) -> int | None:
    """A count header: ASCII digits from 0 to `maximum` (oar.core.numbers), else None."""
    raw = headers.get(HEADERS[field])
    return read_whole(raw, 0, maximum) if raw is not None else None


class PeerLink:
    """Calls to one paired relay at `url` with its pairing `token`; `name` is how errors name it."""

    def __init__(self, name: str, url: str, token: str, *, connect_timeout: float, read_margin: float) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self._token = token
        self.connect_timeout = connect_timeout
        self.read_margin = read_margin

    def __repr__(self) -> str:  # never the token
        return f"PeerLink({self.name!r}, {self.url!r})"

    def hello(self, timeout: float | None = None) -> dict[str, Any]:
        """The peer's name, version and features (checks the token too)."""
        return self.request("GET", "/hello", read_timeout=timeout or self.connect_timeout, connect_timeout=timeout)

    def call(self, payload: dict[str, Any], origin: Origin, wait_seconds: float) -> dict[str, Any]:
        """Run one relay_tool call on the peer; its JSON answer, ok or not (a refusal is the
        peer's: its code and sentence pass on unchanged)."""
        return self.request("POST", "/call", body=payload, headers=origin.headers(),
                            read_timeout=wait_seconds + self.read_margin, refusal_ok=True)

    def request(
        self, method: str, path: str, *, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
        read_timeout: float, connect_timeout: float | None = None, refusal_ok: bool = False,
    ) -> dict[str, Any]:
        release_connection()  # no database connection (or transaction) held while the peer answers
        # With traces on, a client span whose context the peer's API continues (`traceparent`).
        route = API + path.partition("?")[0]
        with tracing.span(f"{method} {route}", kind="client", attributes={
            "http.request.method": method, "url.template": route, "oar.peer.relay": self.name,
        }) as span:
            sent = {"Authorization": f"Bearer {self._token}", "Accept": "application/json",
                    "User-Agent": f"oar-relay/{__version__}", **(headers or {}), **tracing.carrier()}
            try:
                with _session() as http:
                    response = http.request(
                        method, self.url + API + path, json=body, headers=sent, allow_redirects=False, stream=True,
                        timeout=(connect_timeout or self.connect_timeout, read_timeout),
                    )
                    raw = response.raw.read(defaults.PEER_MAX_ANSWER_BYTES + 1, decode_content=True)
                    status = response.status_code
            except requests.exceptions.RequestException as error:
                log.info("paired relay %s did not answer: %s", self.name, type(error).__name__)
                tracing.failed(span, "REMOTE_RELAY_OFFLINE")
                raise offline(self.name, _why(error)) from None
            tracing.note(span, {"http.response.status_code": status})
        return self._answer(status, raw, refusal_ok)

    def _answer(self, status: int, raw: bytes, refusal_ok: bool) -> dict[str, Any]:
        answer = _json_object(raw) if len(raw) <= defaults.PEER_MAX_ANSWER_BYTES else None
        code = answer.get("code") if answer is not None else None
        if status == 401 or code == "REMOTE_RELAY_UNAUTHORIZED":
            raise ActionError(
                "REMOTE_RELAY_UNAUTHORIZED",
                f'Relay "{self.name}" rejected this relay\'s pairing token (revoked, or never valid there). '
                "Ask the user to pair the relays again. Nothing was done there.",
            ).answered_as(502).in_full()
        if answer is not None and answer.get("ok") is True and status == 200:
            return answer
        if answer is not None and answer.get("ok") is False and isinstance(code, str) and _known(code):
            if refusal_ok:
                return answer
            raise refusal(answer)
        if 300 <= status < 400:
            detail = "redirected the call elsewhere; paired relays' calls are not followed to other addresses"
        elif answer is None:
            detail = f"answered HTTP {status} with something that is not a relay's JSON answer"
        else:
            detail = f"answered HTTP {status} without a code of its own"
        if status == 200:  # a 200 that is not a relay's answer: as if the peer did not answer properly
            raise ActionError(
                "REMOTE_RELAY_OFFLINE", f'Relay "{self.name}" {detail}. What was asked there is unknown.'
            ).in_full()
        raise ActionError(f"REMOTE_RELAY_HTTP_{status}", f'Relay "{self.name}" {detail}.').in_full()


def refusal(answer: dict[str, Any]) -> ActionError:
    """A peer's refusal as this relay's error: its code, sentence and helpful fields."""
    extra = {key: value for key, value in answer.items() if key not in ("ok", "code", "error")}
    code = answer["code"]
    # A refusal about the peer's own link to another relay keeps its code; its status mirrors it here.
    status = 502 if code == "REMOTE_RELAY_UNAUTHORIZED" else None
    return ActionError(code, str(answer.get("error") or code), **extra).answered_as(status).in_full()


def offline(name: str, why: str) -> ActionError:
    return ActionError(
        "REMOTE_RELAY_OFFLINE",
        f'Relay "{name}" is not answering ({why}). Nothing was done there; try again later.',
    ).in_full()


def _known(code: str) -> bool:
    return code in STATUS_BY_CODE or peer_http_status(code) is not None


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _why(error: requests.exceptions.RequestException) -> str:
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return "the connection timed out"
    if isinstance(error, requests.exceptions.ReadTimeout):
        return "it did not answer in time"
    if isinstance(error, requests.exceptions.ConnectionError):
        return "the connection failed"
    return "the request failed"


def _session() -> requests.Session:
    """A session that retries connecting only, never a request that was sent, and follows no redirect."""
    http = requests.Session()
    retry = Retry(
        total=defaults.PEER_CONNECT_RETRIES, connect=defaults.PEER_CONNECT_RETRIES, read=0, redirect=0, status=0,
        other=0, backoff_factor=0.2, allowed_methods=None, raise_on_redirect=False, raise_on_status=False,
    )
    adapter = HTTPAdapter(max_retries=retry)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    http.trust_env = False  # no proxy from the environment sees the token
    return http
