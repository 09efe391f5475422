"""Helpers for tests that use the machine's PostgreSQL and free ports."""

from __future__ import annotations

import os
import secrets
import socket
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
