"""The JSON of answers (oar/web/__init__.py RelayJSONProvider): orjson writes them, with the
standard library's text and Flask's rules for what JSON has no type for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from flask import Flask

from oar.web import RelayJSONProvider


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
