"""What an endpoint the call lane can answer reads of its request (oar/web/call_lane.py): its
headers, its WSGI environ (the socket a waiting call watches) and its body. The lane makes one
from the environ; Flask's view for the same route makes one from Flask's request, so that one
function answers both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import request
from werkzeug.datastructures import Headers


@dataclass(frozen=True)
class PlainRequest:
    headers: Headers
    environ: dict[str, Any]
    # Reads the body; Flask's may raise RequestEntityTooLarge (the lane takes no body over the limit).
    read_body: Callable[[], bytes]

    @classmethod
    def of_flask(cls) -> PlainRequest:
        """Flask's request of this request context."""
        return cls(headers=request.headers, environ=request.environ, read_body=lambda: request.get_data(cache=True))
