"""The JSON of answers (oar/web/__init__.py RelayJSONProvider): orjson writes them, with the
standard library's text and Flask's rules for what JSON has no type for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from flask import Flask

from oar.web import RelayJSONProvider
from oar.web.mcp_wire import compact_text


@dataclass
class Point:
    x: int


def test_answers_read_as_the_standard_library_writes_them_and_flask_decides_the_rest() -> None:
    provider = RelayJSONProvider(Flask(__name__))
    answer = {"ok": True, "text": "Grüße \u2028 \x00\x1f \"quoted\" \\ / 😀", "n": -7, "f": 2.5, "none": None,
              "list": [1, {"nested": "ü"}], 3: "an integer key"}
    assert provider.dumps(answer, separators=(",", ":")) == json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
    # Dates and dataclasses as Flask writes them; what orjson declines goes to the standard library.
    special = {"at": datetime(2026, 12, 1, 19, 30), "point": Point(3), "big": 2**70}
    assert json.loads(provider.dumps(special, separators=(",", ":"))) == {
        "at": "Tue, 01 Dec 2026 19:30:00 GMT", "point": {"x": 3}, "big": 2**70,
    }
    # Other calls (indented, default separators) are the standard library's.
    assert provider.dumps({"a": 1}) == '{"a": 1}'


def test_jsonify_writes_the_compact_text_and_a_newline_and_indents_in_debug_mode() -> None:
    app = Flask(__name__)
    app.json = RelayJSONProvider(app)
    answer = {"ok": True, "text": "Grüße 😀", "big": 2**70, "at": datetime(2026, 12, 1, 19, 30)}
    with app.app_context():
        written = app.json.response(answer)
        assert written.mimetype == "application/json"
        assert written.get_data() == (app.json.dumps(answer, separators=(",", ":")) + "\n").encode()
        app.debug = True
        assert app.json.response({"a": 1}).get_data() == b'{\n  "a": 1\n}\n'


# Bodies orjson reads alike, bodies it refuses (NaN, a byte-order mark, UTF-8-encoded or escaped
# lone surrogates, UTF-16, deep nesting) and integers beyond 64 bits, which orjson reads as floats.
BODIES = [
    b'{"action":"read_session","relay":"this","last":3,"f":2.5,"t":true,"n":null}', '{"a": "Grüße 😀"}',
    b'{"a":1,"a":2}', b'[1e400, -0, 1e-400, 0.1000000000000000055511151231257827]', b"NaN", b"\xef\xbb\xbf{}",
    b'"\xed\xa0\x80"', b'"\\ud800"', '"\ud800"', "[1]".encode("utf-16"), b"[" * 2000 + b"]" * 2000,
    b"-9223372036854775809", b"18446744073709551616", b'{"n": 12345678901234567890123}',
    b"", b"[1,]", b'"\x01"', b"{} {}", b"[01]",
]


def test_request_bodies_read_as_the_standard_library_reads_them() -> None:
    provider = RelayJSONProvider(Flask(__name__))
    for body in BODIES:
        try:
            expected = repr(json.loads(body))
        except (ValueError, RecursionError) as error:
            expected = type(error).__name__
        try:
            read = repr(provider.loads(body))
        except (ValueError, RecursionError) as error:
            read = type(error).__name__
        assert read == expected, body[:60]


def test_mcp_tool_results_hold_the_standard_librarys_compact_text() -> None:
    """oar/web/mcp_wire.py compact_text: orjson's text where it is the standard library's, the
    standard library's for what orjson declines (integers beyond 64 bits, lone surrogates)."""
    for value in ({"ok": True, "text": "Grüße \u2028 \x00 \"q\" 😀", "n": [1, -2.5, None]}, {"big": 2**70}, {"s": "\ud800"}):
        assert compact_text(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
