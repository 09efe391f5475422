"""Helpers for tests that use the machine's PostgreSQL, free ports, and local receivers of JSON POSTs."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import peewee

# The PostgreSQL server tests create their databases on.
POSTGRES_SERVER = os.environ.get("OAR_TEST_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_database(url: str, **options: object) -> peewee.PostgresqlDatabase:
    """A plain (unpooled) connection to the database the URL names."""
    parts = urlsplit(url)
    return peewee.PostgresqlDatabase(
        parts.path.lstrip("/") or "postgres", host=parts.hostname, port=parts.port or 5432,
        user=parts.username or "postgres", password=parts.password, **options,
    )


def postgres_unreachable(server_url: str = POSTGRES_SERVER) -> str | None:
    """None when the server answers, else why not."""
    try:
        db = postgres_database(server_url, connect_timeout=3)
        db.connect()
        db.close()
    except (peewee.DatabaseError, peewee.InterfaceError, ImportError) as error:
        parts = urlsplit(server_url)
        return f"PostgreSQL at {parts.hostname}:{parts.port or 5432} does not answer: {error}"
    return None


def _run_outside_transactions(server_url: str, sql: str) -> None:
    admin = postgres_database(server_url)
    admin.connect()
    admin.connection().autocommit = True
    try:
        admin.execute_sql(sql)
    finally:
        admin.close()


def create_postgres_database(server_url: str = POSTGRES_SERVER) -> str:
    """A fresh database of its own on the server; returns its URL."""
    name = f"oar_test_{secrets.token_hex(4)}"
    _run_outside_transactions(server_url, f'CREATE DATABASE "{name}"')
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def drop_postgres_database(url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    _run_outside_transactions(urlunsplit(urlsplit(url)._replace(path="/postgres")), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def serve_json_posts(answer: Callable[[str, dict[str, str], Any], int]) -> ThreadingHTTPServer:
    """A loopback HTTP server standing in for a service the relay posts JSON to (a webhook, ntfy,
    a push service): `answer(path, headers with lower-case names, body)` gives the status; the
    response's body is `{}`. Served from a daemon thread; `shutdown()` ends it."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = answer(self.path, headers, json.loads(body or b"{}"))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
