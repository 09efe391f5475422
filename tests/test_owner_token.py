"""A guessable OAR_OWNER_TOKEN is refused at start, with a message saying what to do
(docs/operations.md#security)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from oar.core import ids
from oar.core.config import Config, ConfigError, owner_token_problem
from oar.web import create_app
from tests.support.processes import PROJECT

WEAK = ("changeme", "oar_o_secret", "a" * 40, "ab" * 20, "0123456789" * 3)


@pytest.mark.parametrize("token", WEAK)
def test_it_finds_short_or_low_entropy_tokens_weak(token: str) -> None:
    assert owner_token_problem(token)


@pytest.mark.parametrize("token", [
    ids.new_token("o"), secrets.token_urlsafe(32), secrets.token_hex(16), "0123456789abcdefghijklmnopqrstuv",
], ids=["owner-token", "urlsafe-32", "hex-16", "distinct-32"])  # named: every process collects the same tests
def test_it_takes_random_tokens(token: str) -> None:
    assert owner_token_problem(token) is None


def test_the_web_app_refuses_to_start_with_a_weak_owner_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"OAR_OWNER_TOKEN is too weak: it is 8 characters long.*did not start"):
        create_app(Config(data_dir=tmp_path, owner_token="changeme", redis_url="redis://127.0.0.1:1"))
    assert not (tmp_path / "oar.db").exists()  # refused before anything was opened


@pytest.mark.parametrize("command", [("-m", "oar", "serve"), ("-c", "import wsgi")])
def test_serve_and_gunicorn_refuse_a_weak_owner_token_with_a_clear_message(tmp_path: Path, command: tuple[str, ...]) -> None:
    env = {**os.environ, "OAR_OWNER_TOKEN": "a" * 40, "OAR_DATA_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1",
           "PORT": "1"}
    done = subprocess.run([sys.executable, *command], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "OAR_OWNER_TOKEN is too weak: it has only 1 different characters" in done.stderr
    assert "secrets.token_urlsafe(32)" in done.stderr
    assert not (tmp_path / "oar.db").exists()
