"""The parts of the HTTP stack under `requests` (urllib3 and the standard library's http.client
and socket file) that are not public API but that the relay relies on, behind one function here:
no other module touches them.

Who needs them: a provider's stream (`oar/providers/sse.py`) is cancelled while a thread is
blocked reading it; closing the response does not wake that read, shutting its socket down does.
Neither requests nor urllib3 hands out a response's socket.

Upgrading requests or urllib3 (pinned in requirements.txt), or Python:
1. Run `tests/test_library_adapters.py`: `socket_of` is checked against a real streamed response.
2. Read the changes to the chain `Response.raw` (urllib3's `HTTPResponse`) → `._fp` (http.client's
   `HTTPResponse`) → `.fp` (the socket's buffered file) → `.raw` (`socket.SocketIO`) → `._sock`.
3. Run the provider cancellation tests (`tests/test_providers.py`).
"""

from __future__ import annotations

import socket

import requests


def socket_of(response: requests.Response) -> socket.socket | None:
    """The socket a streamed response reads from, or None when it has none (already closed and
    given back, or a stack that keeps it elsewhere: the caller then only closes the response)."""
    try:
        sock = response.raw._fp.fp.raw._sock
    except AttributeError:
        return None
    return sock if isinstance(sock, socket.socket) else None
