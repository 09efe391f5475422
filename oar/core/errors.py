"""One error type that knows its JSON shape and HTTP status (docs/calling.md, docs/errors.md)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from oar.core import defaults, metrics

# Error code → HTTP status of the JSON API.
STATUS_BY_CODE: dict[str, int] = {
    "REMOTE_RELAY_INVALID_INPUT": 400,
    "REMOTE_RELAY_UNKNOWN_ACTION": 400,
    "REMOTE_RELAY_UNKNOWN": 404,
    "REMOTE_RELAY_LOCKED": 403,
    "REMOTE_RELAY_FORBIDDEN": 403,
    "REMOTE_RELAY_NO_SANDBOX": 403,
    "REMOTE_INBOUND_DISABLED": 403,
    "REMOTE_RELAY_HOP_LIMIT": 403,
    "REMOTE_RELAY_APPROVAL_DENIED": 403,
    "REMOTE_RELAY_PERMISSION": 403,
    "REMOTE_RELAY_NO_ACTIVE_TURN": 403,
    "REMOTE_RELAY_RATE_LIMITED": 429,
    "REMOTE_RELAY_TOO_MANY_WAITS": 429,
    "REMOTE_RELAY_OFFLINE": 502,
    "REMOTE_RELAY_UNAUTHORIZED": 401,
    "REMOTE_RELAY_NOT_FOUND": 404,
    "REMOTE_RELAY_BUSY": 409,
    "REMOTE_RELAY_LOCAL_DISABLED": 403,
    "REMOTE_RELAY_NESTED_SESSION": 403,
    "REMOTE_RELAY_SESSION_LIMIT": 409,
    "REMOTE_RELAY_OWN_SESSION": 400,
    "REMOTE_RELAY_UNSUPPORTED": 400,
    "REMOTE_RELAY_UNKNOWN_MODEL": 400,
    "REMOTE_RELAY_UNKNOWN_GROUP": 400,
    "REMOTE_RELAY_PROVIDER_UNAVAILABLE": 400,
    "REMOTE_RELAY_SCHEDULE_LIMIT": 409,
    "REMOTE_RELAY_QUESTION_LIMIT": 409,
    "REMOTE_RELAY_SUBSCRIPTION_LIMIT": 409,
    "REMOTE_RELAY_INTERNAL": 500,
    "REMOTE_RELAY_DATABASE_BUSY": 503,
    # The caller went away while its call waited (nobody reads it; 499 as proxies log a closed request).
    "REMOTE_RELAY_CALLER_GONE": 499,
}


_PEER_HTTP_CODE = re.compile("REMOTE_RELAY_HTTP_([0-9]{3})")

# The sentence a refusal ends with, saying what was not done ("Nothing was sent.", "No session was
# created."): a message that already ends with one keeps it instead of the action's (`ending`).
_SUFFIX_SENTENCE = re.compile(r"(?:^|[.!?)] )(?:Nothing|No [a-z]+) was [a-z]+\.$")


class ActionError(Exception):
    """A refused or failed call. `message` says what was wrong and what was not done."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        if code not in STATUS_BY_CODE and peer_http_status(code) is None:
            raise ValueError(f"unknown error code {code}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra
        # A paired relay's refusal passed on keeps its code but may answer another status
        # (a token the peer rejected is 502 here, not 401: docs/errors.md); see `answered_as`.
        self.http_status: int | None = None
        # Says in full what was and was not done (a paired relay's answer or its link's failure,
        # or a refusal whose last sentence says what comes next): no sentence is added (`ending`).
        self.said_in_full = False

    def ending(self, nothing: str) -> ActionError:
        """The same error ending with `nothing`, the sentence that says what the refused call did
        not do, once: domain code raises without it and whoever answers the caller adds it (the
        dispatcher the action's, the owner API its own). Left as it is when it already ends with
        such a sentence (a refusal that says something else was or was not done) or was said in full."""
        if nothing and not self.said_in_full and not _SUFFIX_SENTENCE.search(self.message):
            self.message = f"{self.message} {nothing}"
            self.args = (self.message,)
        return self

    def in_full(self) -> ActionError:
        """The same error, marked as said in full (`said_in_full`): passed on as it is."""
        self.said_in_full = True
        return self

    def answered_as(self, status: int | None) -> ActionError:
        """The same error, answered with `status` instead of its code's (None: its code's)."""
        self.http_status = status
        return self

    @property
    def status(self) -> int:
        if self.http_status is not None:
            return self.http_status
        return STATUS_BY_CODE.get(self.code) or peer_http_status(self.code) or 502

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "code": self.code, "error": self.message, **self.extra}


def peer_http_status(code: str) -> int | None:
    """The status of `REMOTE_RELAY_HTTP_<n>` (a paired relay answered HTTP n with no code of its
    own): 4xx passed through, every other n 502; None for any other code."""
    # Three ASCII digits: a paired relay's answer may hold any code (`str.isdigit` takes `²²²`,
    # which `int` refuses).
    found = _PEER_HTTP_CODE.fullmatch(code) if isinstance(code, str) else None
    if found is None:
        return None
    n = int(found[1])
    return n if 400 <= n < 500 else 502


@contextlib.contextmanager
def refusals_ending(nothing: str) -> Iterator[None]:
    """Refusals raised in the block end with `nothing` (`ActionError.ending`): the one place an
    edge that answers a caller (the dispatcher, an owner operation) says what was not done."""
    try:
        yield
    except ActionError as error:
        error.ending(nothing)
        raise


def invalid(message: str, **extra: Any) -> ActionError:
    return ActionError("REMOTE_RELAY_INVALID_INPUT", message, **extra)


def http_error(status: int, message: str) -> ActionError:
    """An HTTP error that is not the relay's own (an unknown path, a wrong method, a body too
    large): `REMOTE_RELAY_NOT_FOUND` for 404, else `REMOTE_RELAY_INVALID_INPUT`, answered with
    the HTTP status itself (docs/errors.md)."""
    code = "REMOTE_RELAY_NOT_FOUND" if status == 404 else "REMOTE_RELAY_INVALID_INPUT"
    return ActionError(code, message).answered_as(status)


def not_found(message: str, **extra: Any) -> ActionError:
    return ActionError("REMOTE_RELAY_NOT_FOUND", message, **extra)


def database_busy() -> ActionError:
    """The database stayed locked or out of connections (docs/errors.md): try again shortly."""
    wait = defaults.DATABASE_BUSY_RETRY_SECONDS
    metrics.database_busy()
    return ActionError(
        "REMOTE_RELAY_DATABASE_BUSY",
        f"The relay's database is busy (another write held it too long). The call's changes were rolled back; "
        f"try again in {wait} seconds.",
        retryAfterSeconds=wait,
    )

