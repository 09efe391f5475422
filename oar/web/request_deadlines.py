"""gunicorn's threaded worker with deadlines for reading a request (docs/operations.md#slow-clients).

gthread hands a connection to a pool thread once its first byte arrives, and the thread then
reads the request head and body with blocking reads: a client that sends one byte every few
seconds holds the thread as long as it likes, since a per-read socket timeout never fires.
`DeadlineWorker` bounds the whole read instead: the head (request line and headers) must have
arrived within `REQUEST_HEAD_TIMEOUT_SECONDS` of a thread taking the connection, the body within
`REQUEST_BODY_TIMEOUT_SECONDS` after the head. Past either, the request is answered 408 and the
connection closed. What the application does afterwards (a long wait) is not bounded here.
`gunicorn.conf.py` names this class as the worker.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any

from gunicorn.http.parser import RequestParser
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import RequestTimeout

from oar.core.config import from_environment
from oar.core.errors import invalid


class ReadDeadline(RequestTimeout):
    """The client did not send its request in time. A werkzeug 408, so that a body read that runs
    out inside the application is answered by the app's error handler in the JSON shape."""


class DeadlineUnreader(SocketUnreader):
    """gunicorn's socket reader, with an absolute deadline (`time.monotonic()`) for every read."""

    def __init__(self, sock: Any, max_chunk: int = 8192) -> None:
        super().__init__(sock, max_chunk)
        self.deadline: float | None = None
        self.what = "request"
        self.missed = False

    def chunk(self, size_hint: int | None = None) -> bytes:
        if self.deadline is None:
            return bytes(super().chunk(size_hint))
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self._missed()
        previous = self.sock.gettimeout()
        self.sock.settimeout(remaining)
        try:
            return bytes(super().chunk(size_hint))
        except TimeoutError:
            raise self._missed() from None
        finally:
            with contextlib.suppress(OSError):
                self.sock.settimeout(previous)

    def _missed(self) -> ReadDeadline:
        self.missed = True
        return ReadDeadline(f"The {self.what} did not arrive in time; the connection is closed.")


class DeadlineConn(TConn):
    """A connection whose parser reads through a `DeadlineUnreader`."""

    read_deadline: float | None = None

    def init(self) -> None:
        fresh = not self.initialized
        super().init()
        if fresh and isinstance(self.parser, RequestParser) and type(self.parser.unreader) is SocketUnreader:
            plain = self.parser.unreader
            reader = DeadlineUnreader(plain.sock, plain.mxchunk)
            reader.buf = plain.buf  # bytes already read ahead (a protocol preface given back)
            reader.deadline, reader.what = self.read_deadline, "request head"
            self.parser.unreader = reader


class DeadlineWorker(ThreadWorker):
    """gthread with deadlines for a request's head and body (the module's docstring says why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = from_environment()
        self.head_seconds = config.time("REQUEST_HEAD_TIMEOUT_SECONDS")
        self.body_seconds = config.time("REQUEST_BODY_TIMEOUT_SECONDS")

    def accept(self, listener: socket.socket) -> None:
        """gthread's accept, making a `DeadlineConn`."""
        try:
            client_sock, client_addr = listener.accept()
        except BlockingIOError:
            return  # another worker took it
        except OSError as error:
            if isinstance(error, ConnectionAbortedError):
                return
            raise
        self.nr_conns += 1
        client_sock.setblocking(True)
        self.enqueue_req(DeadlineConn(self.cfg, client_sock, client_addr, listener.getsockname()))

    def handle(self, conn: DeadlineConn) -> Any:
        """One request on the connection, its head read by the head deadline."""
        conn.read_deadline = time.monotonic() + self.head_seconds
        reader = _reader(conn)
        if reader is not None:  # a kept-alive connection: its next request gets a deadline of its own
            reader.deadline, reader.what, reader.missed = conn.read_deadline, "request head", False
        return super().handle(conn)

    def handle_request(self, req: Any, conn: DeadlineConn) -> bool:
        """Runs the application with the body deadline set; a missed deadline closes the connection."""
        reader = _reader(conn)
        if reader is None:
            return bool(super().handle_request(req, conn))
        reader.deadline, reader.what = time.monotonic() + self.body_seconds, "request body"
        try:
            keep = bool(super().handle_request(req, conn))
        finally:
            # The application's own time is not bounded here, nor gunicorn's drain of an unread body.
            reader.deadline = None
        return keep and not reader.missed

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        if not isinstance(exc, ReadDeadline):
            super().handle_error(req, client, addr, exc)
            return
        peer = addr[0] if isinstance(addr, tuple) and addr else "?"
        self.log.info("Closed a connection from %s: %s", peer, exc.description)
        body = json.dumps(invalid(f"{exc.description} Nothing was done.").to_dict()).encode()
        head = (
            f"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            client.settimeout(1.0)  # a client that does not read its answer does not hold the thread either
            client.sendall(head + body)


def _reader(conn: DeadlineConn) -> DeadlineUnreader | None:
    reader = getattr(conn.parser, "unreader", None)
    return reader if isinstance(reader, DeadlineUnreader) else None
