"""Property-based tests: whatever an agent or the owner posts, the relay answers in the documented shape.

Random action payloads (registered action names and junk, random argument names, random
JSON values of every type: nested, huge integers, NaN and infinities, unicode, lone
surrogates, NUL characters, None, booleans) are posted over real HTTP to the real relay.
It never answers 5xx, never a traceback or an HTML page: always a JSON object with `ok`,
and when `ok` is false a docs/errors.md `code` whose status is the HTTP status (docs/calling.md, docs/errors.md).

The owner API gets random bodies, path ids and query strings on every route the app describes
as the owner's (oar/web/described.py). After each run the relay's logs (the in-thread web's
records, the worker processes' log files) hold no traceback.

Prompts are kept from tying up the workers: `wait_seconds` is 0 for actions that wait
(unless the drawn value is one the relay must refuse anyway), and lines starting with "!"
(echo directives such as !sleep) are taken out of prompt text.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import requests
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oar.actions.catalog import load_actions
from oar.core.errors import STATUS_BY_CODE
from oar.core.fields import Param
from oar.web.described import OWNER, operation_of
from tests.support import logcheck, suites
from tests.support.clients import Agent
from tests.support.relays import Relay, RelayStack

ACTIONS = load_actions()
REGISTERED = sorted(ACTIONS)
PARAM_NAMES = sorted({name for spec in ACTIONS.values() for name in spec.params} | {"may_create_sessions"})
WAITING = {"send", "create_session", "wait", "take"}

# Payloads per test: 150 in the short form, 10,000 in the full one
# (`OAR_SUITE=full python -m pytest tests/test_fuzz.py -s`).
EXAMPLES = suites.scale(150, 10_000)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Strings an agent might send, and strings that have broken servers before.
INTERESTING = [
    "", " ", "this", "desk", "DESK", " this ", "build-box", "none", "None", "auto", "AUTO", "fast", "agent", "plan",
    "ask", "queue", "fail", "maybe", "recent", "all", "archived", "summarized", "full", "hidden", "low", "high",
    "echo", "echo-1", "echo-2", "gpt-9", "grp_", "grp_nosuch", "/", "/etc", "/tmp", "~", "~root", "~/x", "..",
    "../../etc/passwd", "relative/dir", "\x00", "a\x00b", "\ud800", "x\udfffy", "ünïcödé", "🛰️ relay", "\u202e",
    "'; DROP TABLE session; --", "%", "_", "%_%", "\\", "\r\n", "NaN", "null", "true", "[]", "{}", "0", "-1",
    "x" * 300, "<child>", "<child8>", "<own>", "<own8>", "<other>", "<prompt>", "<reply>",
]
HUGE = [2**31, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**100]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=120),
    st.integers(),
    st.sampled_from(HUGE),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=24),
    st.text(st.characters(categories=("Cs", "Cc", "Zs", "So", "Lo")), max_size=8),  # surrogates, controls, …
    st.sampled_from(INTERESTING),
)
values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
names = st.one_of(st.sampled_from(PARAM_NAMES), st.text(max_size=12)).filter(lambda name: name != "action")


@st.composite
def action_names(draw: st.DrawFn) -> Any:
    """Mostly a registered action (sometimes padded with white space), else junk."""
    pick = draw(st.integers(min_value=0, max_value=9))
    if pick == 0:
        return draw(st.one_of(st.text(max_size=16), values))
    if pick == 1:
        return draw(st.sampled_from(REGISTERED)).upper()
    if pick == 2:
        return f" {draw(st.sampled_from(REGISTERED))}\n"
    return draw(st.sampled_from(REGISTERED))


def param_values(param: Param) -> st.SearchStrategy[Any]:
    """Values for one argument: half of the time of its own kind (often valid), else anything."""
    if param.kind == "int":
        low = -2 if param.minimum is None else param.minimum - 1
        high = (param.maximum if param.maximum is not None else 10_000) + 1
        own: st.SearchStrategy[Any] = st.integers(min_value=low, max_value=min(high, low + 100_000))
    elif param.kind == "bool":
        own = st.booleans()
    elif param.choices:
        own = st.sampled_from([*param.choices, *(choice.upper() for choice in param.choices), "maybe"])
    elif param.kind == "str":
        own = st.one_of(st.sampled_from(INTERESTING), st.text(max_size=24))
    else:
        own = values
    return st.one_of(own, values)

# Values that make each action succeed (filled in with real ids).
PLAUSIBLE = {"relay": "this", "session": "<child>", "text": "hello", "message_id": "<prompt>", "title": "fuzzed"}


@st.composite
def payloads(draw: st.DrawFn) -> Any:
    """A relay_tool body: mostly an action with arguments, sometimes any JSON at all."""
    if draw(st.integers(min_value=0, max_value=19)) == 0:
        return draw(values)
    action = draw(action_names())
    spec = ACTIONS.get(action.strip()) if isinstance(action, str) else None
    body: dict[str, Any] = {}
    if spec is not None and draw(st.integers(min_value=0, max_value=3)) > 0:
        # Aim deeper: start from valid arguments, then maybe spoil some with the action's own names.
        body.update({name: value for name, value in PLAUSIBLE.items() if name in spec.params})
        for name in draw(st.lists(st.sampled_from(sorted(spec.params) or ["relay"]), max_size=3, unique=True)):
            body[name] = draw(param_values(spec.params[name])) if name in spec.params else draw(values)
        body.update(draw(st.dictionaries(names, values, max_size=2)))
    else:
        if draw(st.booleans()):
            body["relay"] = "this"
        body.update(draw(st.dictionaries(names, values, max_size=6)))
    body["action"] = action
    return body


def surely_refused_wait(value: Any) -> bool:
    """Whether `wait_seconds: value` is refused before anything waits (else the test makes it 0)."""
    if value is True:
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        return not 0 <= value <= 86_400
    if isinstance(value, float):
        return not math.isfinite(value) or not value.is_integer() or not 0 <= value <= 86_400
    if isinstance(value, (str, list, dict)):
        return bool(value)
    return False


def without_directives(text: str) -> str:
    """The prompt without echo directives: the echo provider reads lines starting with "!"."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("!"))


def tame(payload: Any, refs: dict[str, str]) -> Any:
    """Fill in real ids, keep prompts short of directives and waits at 0."""
    if isinstance(payload, str):
        return refs.get(payload, payload)
    if isinstance(payload, list):
        return [tame(item, refs) for item in payload]
    if not isinstance(payload, dict):
        return payload
    payload = {key: tame(value, refs) for key, value in payload.items()}
    if isinstance(payload.get("text"), str):
        payload["text"] = without_directives(payload["text"])
    action = payload.get("action")
    if isinstance(action, str) and action.strip() in WAITING and not surely_refused_wait(payload.get("wait_seconds")):
        payload["wait_seconds"] = 0
    return payload


def post_json(url: str, token: str | None, method: str, payload: Any) -> requests.Response:
    """Post `payload` as Python's json writes it: NaN and Infinity included, surrogates escaped."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return requests.request(method, url, data=json.dumps(payload).encode(), headers=headers, timeout=60)


# Statuses werkzeug answers for HTTP errors that are not the relay's own (docs/errors.md).
HTTP_OWN_STATUSES = (405, 408, 413)


def assert_spec_shaped(response: requests.Response) -> dict[str, Any]:
    """docs/calling.md, docs/errors.md: never 5xx, never HTML or a traceback; JSON with ok, and a code matching the status."""
    assert response.status_code < 500, response.text[:500]
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:500]
    assert "Traceback" not in response.text and "<html" not in response.text.lower(), response.text[:500]
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("ok"), bool), body
    if body["ok"]:
        assert response.status_code in (200, 201), (response.status_code, body)
    else:
        assert body["code"] in STATUS_BY_CODE, body
        # docs/errors.md: an HTTP error that is not the relay's own (a wrong method, a body over the
        # limit) keeps its status with REMOTE_RELAY_INVALID_INPUT; a random id can name another route.
        assert STATUS_BY_CODE[body["code"]] == response.status_code or (
            body["code"] == "REMOTE_RELAY_INVALID_INPUT" and response.status_code in HTTP_OWN_STATUSES
        ), (response.status_code, body)
        assert isinstance(body["error"], str) and body["error"].strip(), body
    return body


@pytest.fixture
def refs(relay: Relay, desk: Agent) -> dict[str, str]:
    created = desk.ok("create_session", relay="this", text="fuzz target", wait_seconds=30)
    other = relay.conversation("other")
    reply = next(
        m["id"] for m in relay.owner.get(f"/api/v1/owner/sessions/{created['session']}")["messages"]
        if m["role"] == "assistant"
    )
    return {
        "<child>": created["session"],
        "<child8>": created["session"][:8],
        "<own>": desk.session_id,
        "<own8>": desk.session_id[:8],
        "<other>": other.session_id,
        "<prompt>": created["message_id"],
        "<reply>": reply,
    }


@contextlib.contextmanager
def owner_denying_cards(relay: Relay) -> Iterator[list[str]]:
    """The owner denies every card that shows in the Inbox while the block runs: a random call can
    need one the conversation has no remembered Allow for (loop protection after many prompts, a
    mode change), and such a call waits for the owner as its own live turn (docs/rules.md)."""
    denied: list[str] = []
    done = threading.Event()

    def deny() -> None:
        while not done.wait(0.2):
            with contextlib.suppress(requests.RequestException, KeyError):
                for card in relay.owner.get("/api/v1/owner/inbox")["cards"]:
                    relay.owner.post(f"/api/v1/owner/cards/{card['id']}", {"decision": "deny"})
                    denied.append(card["id"])

    thread = threading.Thread(target=deny, name="fuzz-owner", daemon=True)
    thread.start()
    try:
        yield denied
    finally:
        done.set()
        thread.join(10)


def test_random_action_payloads_always_get_a_spec_shaped_answer(
    relay: Relay, desk: Agent, refs: dict[str, str], logged: logcheck.Logged,
) -> None:
    answered: dict[bool, int] = {True: 0, False: 0}
    codes: set[str] = set()

    @FUZZ
    @given(payload=payloads())
    def one_call(payload: Any) -> None:
        response = post_json(relay.url + "/api/v1/relay_tool", desk.token, "POST", tame(payload, refs))
        body = assert_spec_shaped(response)
        answered[body["ok"]] += 1
        if not body["ok"]:
            codes.add(body["code"])

    with owner_denying_cards(relay) as denied:
        one_call()
    print(f"\naction fuzz: {sum(answered.values())} payloads, {answered[True]} answered ok, "
          f"{len(codes)} error codes, {len(denied)} cards denied by the owner meanwhile")
    # The fuzzing reached both sides: calls that succeeded and calls that were refused.
    assert answered[True] > 0 and answered[False] > 0, answered
    assert "REMOTE_RELAY_INVALID_INPUT" in codes, codes
    # And the relay is still well afterwards.
    health = requests.get(relay.url + "/healthz", timeout=30)
    assert health.status_code == 200 and health.json()["ok"] is True
    assert desk.ok("read_session", relay="this", session=refs["<child>"])["session"]["id"] == refs["<child>"]




# Saving a provider discovers its models over HTTP at its `base_url` (or the kind's public
# default): a random body would leave loopback, so that route is fuzzed in the security and
# schemathesis suites' refusals only.
NOT_CALLED = {("PUT", "/api/v1/owner/providers/<name>")}


def owner_routes(app: Flask) -> list[tuple[str, str, frozenset[str]]]:
    """Every owner route the app describes: (method, rule, its body's declared field names)."""
    routes = []
    for rule in app.url_map.iter_rules():
        operation = operation_of(app.view_functions[rule.endpoint])
        if operation is None or operation.caller != OWNER:
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            if (method, rule.rule) not in NOT_CALLED:
                fields = frozenset(operation.body or {}) | frozenset(operation.query)
                routes.append((method, rule.rule, fields))
    return routes


ALL_OWNER_FIELDS = sorted({"agent_sessions_enabled", "max_wait_seconds", "title", "text", "name", "decision", "approvals"})
path_junk = st.one_of(st.sampled_from(INTERESTING), st.text(min_size=1, max_size=16)).map(lambda text: quote(text, safe="", errors="surrogatepass")).filter(bool)


@st.composite
def owner_calls(draw: st.DrawFn, routes: list[tuple[str, str, frozenset[str]]], places: dict[str, list[str]]) -> Any:
    """A route with its ids filled in (mostly real ones), a body and maybe a query string."""
    method, rule, fields = draw(st.sampled_from(routes))
    path = rule
    for name, real in places.items():
        if f"<{name}>" in path:
            path = path.replace(f"<{name}>", draw(st.one_of(st.sampled_from(real), path_junk)) if real else draw(path_junk))
    if "<" in path:  # an id the fuzz has no real value for
        head, _, rest = path.partition("<")
        path = head + draw(path_junk) + rest.partition(">")[2]
    known = sorted(fields) or ALL_OWNER_FIELDS
    body = draw(st.one_of(
        st.dictionaries(st.one_of(st.sampled_from(known), st.text(max_size=10)), values, max_size=4),
        values,
    ))
    query = draw(st.dictionaries(st.sampled_from(known + ["limit", "status", "wait_seconds"]), st.text(max_size=12), max_size=2))
    return method, path, body, query


def test_random_owner_api_calls_always_get_a_spec_shaped_answer(
    stack: RelayStack, relay: Relay, refs: dict[str, str], logged: logcheck.Logged,
) -> None:
    assert stack.app is not None
    routes = owner_routes(stack.app)
    assert len(routes) >= 20, routes
    original = relay.owner.get("/api/v1/owner/settings")["settings"]
    group = relay.owner.post("/api/v1/owner/groups", {"name": "fuzzed"})["group"]["id"]
    places = {"session_id": [refs["<child>"], refs["<other>"], refs["<child8>"]], "group_id": [group], "name": ["echo"]}
    answered: dict[bool, int] = {True: 0, False: 0}
    reached: set[tuple[str, str]] = set()

    @FUZZ
    @given(call=owner_calls(routes, places))
    def one_call(call: tuple[str, str, Any, dict[str, str]]) -> None:
        method, path, body, query = call
        url = relay.url + path + ("?" + "&".join(f"{quote(k, errors='surrogatepass')}={quote(v, errors='surrogatepass')}" for k, v in query.items()) if query else "")
        try:
            response = post_json(url, relay.owner.token, method, tame(body, refs))
            ok = assert_spec_shaped(response)["ok"]
            answered[ok] += 1
            if ok:
                reached.add((method, path))
        finally:
            # A random but valid settings change (a new relay name, a rate limit) must not leak into the next call.
            if method == "PATCH" and path.endswith("/settings"):
                relay.owner.patch("/api/v1/owner/settings", original)

    one_call()
    print(f"\nowner API fuzz: {sum(answered.values())} calls over {len(routes)} routes, {answered[True]} answered ok")
    assert answered[True] > 0 and answered[False] > 0, answered
    assert relay.owner.get("/api/v1/owner/settings")["settings"] == original
    # The owner's own routes still answer afterwards.
    assert relay.owner.get("/api/v1/owner/sessions")["ok"] is True


def test_the_owner_token_is_not_an_agent_token(relay: Relay, desk: Agent) -> None:
    """relay_tool with the owner's token: refused as any unknown agent token is."""
    response = post_json(relay.url + "/api/v1/relay_tool", relay.owner.token, "POST", {"action": "list_sessions", "relay": "this"})
    assert response.status_code == 401 and assert_spec_shaped(response)["code"] == "REMOTE_RELAY_UNAUTHORIZED"


def test_an_id_with_a_nul_in_any_path_is_not_found(stack: RelayStack, relay: Relay, desk: Agent, logged: logcheck.Logged) -> None:
    """Found by the owner API fuzz on PostgreSQL (which cannot even look such an id up): every route
    with an id in its path answers 404 in the error shape, with the route's own credential."""
    assert stack.app is not None
    checked = 0
    for rule in stack.app.url_map.iter_rules():
        if "<" not in rule.rule or not rule.rule.startswith("/api/"):
            continue
        operation = operation_of(stack.app.view_functions[rule.endpoint])
        token = relay.owner.token if operation is not None and operation.caller == OWNER else desk.token
        path = re.sub(r"<(?:[a-z]+:)?[a-z_]+>", "a%00b", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            if (method, rule.rule) in NOT_CALLED:
                continue
            response = post_json(relay.url + path, token, method, {})
            assert response.status_code == 404, (method, rule.rule, response.status_code, response.text[:300])
            assert assert_spec_shaped(response)["code"] == "REMOTE_RELAY_NOT_FOUND"
            checked += 1
    assert checked >= 15, checked
