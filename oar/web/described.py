"""What each HTTP route declares about itself for the OpenAPI document (oar/web/openapi.py).

A route's view function carries an `Operation` (`@described(...)` under the route decorator):
who may call it, the `Param` table its JSON body is checked against (the same table the
handler or the owner service passes to `check_fields`), its query parameters, the fields of
its answer and the error statuses it may give. The document is built by walking the Flask
app's routes and reading these, so a route and its description sit side by side and a test
fails when a route under /api/v1 has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from oar.core.fields import Param

# Who may call a route: the session's agent token, the owner token, a pairing token this relay
# gave out (the relay-to-relay API, not in the OpenAPI document), or anyone.
SESSION = "session"
OWNER = "owner"
PEER = "peer"
ANYONE = "anyone"

# JSON Schema snippets for the fields of answers (the answers' inner shapes are documented in docs/).
TEXT: dict[str, Any] = {"type": "string"}
MAYBE_TEXT: dict[str, Any] = {"type": ["string", "null"]}
FLAG: dict[str, Any] = {"type": "boolean"}
OBJECT: dict[str, Any] = {"type": "object"}
MAYBE_OBJECT: dict[str, Any] = {"type": ["object", "null"]}
OBJECTS: dict[str, Any] = {"type": "array", "items": {"type": "object"}}
TEXTS: dict[str, Any] = {"type": "array", "items": {"type": "string"}}

ATTRIBUTE = "__operation__"

View = TypeVar("View", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    """One route as the OpenAPI document shows it."""

    summary: str
    caller: str
    # The body's declared fields; None when the route takes no body.
    body: Mapping[str, Param] | None = None
    # Instead of `body`: one of several named body schemas, told apart by the field `choose_by`
    # (relay_tool: one schema per action, by `action`).
    body_choices: Callable[[], Mapping[str, dict[str, Any]]] | None = None
    choose_by: str = ""
    # Whether fields the table does not declare are refused (check_fields' strict).
    strict: bool = True
    query: Mapping[str, Param] = field(default_factory=dict)
    status: int = 200
    # The answer's fields besides `ok`, each a JSON Schema.
    answer: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # A whole answer schema instead of `ok` + `answer` (healthz, the document itself).
    answer_schema: dict[str, Any] | None = None
    # Error statuses the route gives besides the ones every route of its kind gives.
    errors: tuple[int, ...] = ()
    tag: str = ""


def described(operation: Operation) -> Callable[[View], View]:
    """Attach `operation` to a view function (above or below the route decorator: Flask keeps
    the same function object)."""

    def attach(view: View) -> View:
        setattr(view, ATTRIBUTE, operation)
        return view

    return attach


def operation_of(view: Callable[..., Any]) -> Operation | None:
    return getattr(view, ATTRIBUTE, None)
