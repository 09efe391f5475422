"""The parts of Flask that are not its public API but that the relay relies on, each behind one
function here: no other module touches them.

Who needs them: the app's JSON provider (`oar/web/__init__.py`) writes `jsonify`'s body with
orjson, so it reads the value `jsonify(...)` was given the way Flask's own provider reads it,
and builds the response on the app the provider belongs to.

Upgrading Flask (pinned in requirements.txt):
1. Run `tests/test_library_adapters.py`: each function here is checked against the installed Flask.
2. Read Flask's changes to `flask.json.provider.JSONProvider._prepare_response_obj(args, kwargs)`
   (one positional value, several as a tuple, or keywords as a dict, never both) and to the `_app` its `__init__` keeps.
3. Run the tests of the JSON answers (`tests/test_answer_json.py`).
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.json.provider import JSONProvider


def response_value(provider: JSONProvider, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What `jsonify(*args, **kwargs)` serializes: the one positional value, the tuple of several,
    or the keywords as a dict; raises TypeError for both at once, as Flask does."""
    return provider._prepare_response_obj(args, kwargs)


def app_of(provider: JSONProvider) -> Flask:
    """The app a JSON provider was made for (a weak proxy of it, as Flask keeps it)."""
    return provider._app  # type: ignore[return-value]
