"""Whether an HTTP caller is still there while its call waits (the agents' API and MCP alike)."""

from __future__ import annotations

import socket
from typing import Any

from oar.core.waiting import CallerWatch


def connection_watch(environ: dict[str, Any]) -> CallerWatch:
    """Sees an HTTP caller go away while its call waits: the request's socket (gunicorn's and
    werkzeug's servers put it in the environ), peeked without blocking, reads end-of-file once the
    client closed the connection. Where there is no plain socket to peek (TLS ends in the server,
    another WSGI server), nothing is seen here and a turnless card lives on its lease."""
    sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
    if type(sock) is not socket.socket:  # absent, or an SSLSocket (it cannot peek)
        return CallerWatch()
    return CallerWatch(gone=lambda: _closed(sock), every_seconds=1.0)


def _closed(sock: socket.socket) -> bool:
    try:
        # The body was read before the call ran; a closed connection reads b"", a pipelined request data.
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False  # open, nothing sent
    except OSError:
        return True  # reset, or the socket is gone
