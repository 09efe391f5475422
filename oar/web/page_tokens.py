"""A conversation's agent tokens on the page (docs/owner-api.md#agent-tokens-on-the-page): a new
token shown once, with the lines that connect Claude Code, Codex, Cursor or a stdio client to
this relay as that conversation, and revoking (the token just shown, or every one). Routes of
the page's blueprint (its CSRF check and sign-in guard apply) that call the owner service
`POST /api/v1/owner/sessions/<id>/tokens` and the revoke routes call.

A token is in the one response that mints it and nowhere else: not in a URL, a cookie, a flash
message or a log line, and the page is never cached (`Cache-Control: no-store`, as every page).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

import oar
from oar.core import defaults
from oar.core.config import Config
from oar.core.errors import ActionError
from oar.owner import conversations
from oar.sessions import sessions
from oar.sessions.sessions import Session
from oar.web import page_views, runtime
from oar.web.page import blueprint, done, form_text, payload_of, refused

# The name the lines give this relay in a client's list of MCP servers.
SERVER_NAME = "relay"


@dataclass(frozen=True)
class ClientLines:
    """Ready-made text for one client: where it goes, and the text to copy."""

    key: str
    client: str
    where: str
    text: str


def relay_address(config: Config, page_address: str) -> str:
    """This relay's address as agents reach it: `OAR_PUBLIC_URL`, else `http://OAR_HOST:PORT`.
    A relay listening on every address (`OAR_HOST=0.0.0.0`) has no one address of its own: the
    address this page was opened at stands in (`page_address`, the request's scheme and host)."""
    if config.public_url or config.host not in defaults.EVERY_ADDRESS_HOSTS:
        return config.base_url
    return page_address.rstrip("/")


def stdio_command() -> tuple[str, list[str], dict[str, str]]:
    """How a client on this machine starts `oar mcp`: the `oar` command installed beside the
    relay's Python, else that Python with `-m oar` and the folder that holds the package (so it
    runs from any working directory)."""
    installed = Path(sys.executable).with_name("oar")
    if installed.is_file():
        return str(installed), ["mcp"], {}
    package_home = str(Path(oar.__file__).resolve().parent.parent)
    return sys.executable, ["-m", "oar", "mcp"], {"PYTHONPATH": package_home}


def mcp_servers_json(server: dict[str, Any]) -> str:
    """`{"mcpServers": {"relay": {…}}}`, a field a line (as the README writes it): valid JSON
    that reads at a glance."""
    fields = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in server.items())
    return f'{{"mcpServers": {{{json.dumps(SERVER_NAME)}: {{\n{fields}\n}}}}}}'


def client_lines(address: str, token: str) -> list[ClientLines]:
    """The lines that connect each client to `address` as the token's conversation
    (docs/owner-api.md#agent-tokens-on-the-page): the README's forms, filled in."""
    mcp_url = f"{address}/mcp"
    command, args, extra_env = stdio_command()
    return [
        ClientLines("claude", "Claude Code", "a shell",
                    f"claude mcp add --transport http {SERVER_NAME} {shlex.quote(mcp_url)} "
                    f'--header "Authorization: Bearer {token}"'),
        # TOML's basic strings take JSON's escapes, so json.dumps quotes the URL for both.
        ClientLines("codex", "Codex", "~/.codex/config.toml",
                    f"[mcp_servers.{SERVER_NAME}]\nurl = {json.dumps(mcp_url)}\n"
                    'bearer_token_env_var = "OAR_TOKEN"\ndefault_tools_approval_mode = "approve"'),
        ClientLines("codex-token", "Codex's token", "the environment Codex starts in", f"export OAR_TOKEN={token}"),
        ClientLines("cursor", "Cursor", "~/.cursor/mcp.json",
                    mcp_servers_json({"url": mcp_url, "headers": {"Authorization": f"Bearer {token}"}})),
        ClientLines("stdio", "stdio", "the MCP servers of a client on this machine that starts them as processes",
                    mcp_servers_json({"command": command, "args": args,
                                      "env": {"OAR_URL": address, "OAR_TOKEN": token, **extra_env}})),
    ]


@blueprint.app_template_global()
def agent_connection(token: str) -> dict[str, Any]:
    """What a page showing a new token shows with it (the token page, a new conversation's page):
    this relay's address, whether it is the configured public one, and each client's lines."""
    config = runtime().config
    address = relay_address(config, request.host_url)
    return {"address": address, "public": bool(config.public_url), "lines": client_lines(address, token)}


def tokens_page(session: Session, status: int = 200, token: str | None = None) -> ResponseReturnValue:
    return render_template(
        "tokens.html", page_kind="session", session=session, token=token,
        token_count=page_views.token_count(session.id),
    ), status


def _here(session_id: str) -> str:
    return url_for("page.session_tokens", session_id=session_id)


@blueprint.get("/sessions/<session_id>/tokens")
def session_tokens(session_id: str) -> ResponseReturnValue:
    session = sessions.resolve(session_id, runtime().relay_name())
    if session.id != session_id:  # a short id: the page lives at the full one
        return redirect(_here(session.id))
    return tokens_page(session)


@blueprint.post("/sessions/<session_id>/tokens")
def mint_token(session_id: str) -> ResponseReturnValue:
    """A new agent token, shown in this response only (never put in a redirect)."""
    try:
        session, token = conversations.issue_token(runtime(), session_id)
    except ActionError as error:
        return refused(error, _here(session_id))
    return tokens_page(session, 201, token)


@blueprint.post("/sessions/<session_id>/tokens/revoke")
def revoke_shown_token(session_id: str) -> ResponseReturnValue:
    """Revoke the token the page just showed (its form carries it back, as the owner API's body does)."""
    try:
        conversations.revoke_given_token(runtime(), payload_of({"token": form_text("token").strip()}))
    except ActionError as error:
        return refused(error, _here(session_id))
    return done("Revoked the token just shown: its next call is refused. The conversation's other tokens still work.",
                _here(session_id))


@blueprint.post("/sessions/<session_id>/tokens/revoke-all")
def revoke_all_tokens(session_id: str) -> ResponseReturnValue:
    try:
        session, revoked = conversations.revoke_tokens(runtime(), session_id)
    except ActionError as error:
        return refused(error, _here(session_id))
    count = f"{revoked} agent token{'' if revoked == 1 else 's'}"
    return done(f"Revoked {count} of “{session.title}”: each one's next call is refused.", _here(session.id))
