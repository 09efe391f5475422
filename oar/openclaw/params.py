"""The one table of each tool's parameters (docs/openclaw.md): the arguments' checks, the
JSON Schemas of `/mcp/openclaw`, the OpenAPI bodies and the CLI's help are all read from it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from oar.core import defaults
from oar.core.fields import Param
from oar.core.schema import limits_text, object_schema, type_text
from oar.openclaw.keys import KINDS

SESSION_KEY = Param(
    "str", max_length=300,
    description='a session key from sessions_list ("main", "oar:<id>", "agent:<agentId>:subagent:<uuid>", '
    '"cron:<id>") or a session id',
)

PARAMS: dict[str, dict[str, Param]] = {
    "sessions_list": {
        "kinds": Param(
            "list", items=Param("str", choices=KINDS), max_items=len(KINDS),
            description="only sessions of these kinds",
        ),
        "limit": Param(
            "int", minimum=1, maximum=defaults.OPENCLAW_LIST_MAX,
            description=f"how many sessions (default {defaults.OPENCLAW_LIST_DEFAULT})",
        ),
        "activeMinutes": Param("int", minimum=1, maximum=525_600, description="only sessions updated within this many minutes"),
        "messageLimit": Param(
            "int", minimum=0, maximum=defaults.READ_SESSION_LAST_MAX,
            description="include each session's last N messages (0, the default: none; tool results left out)",
        ),
    },
    "sessions_history": {
        "sessionKey": replace(SESSION_KEY, required=True),
        "limit": Param(
            "int", minimum=1, maximum=defaults.READ_SESSION_LAST_MAX,
            description=f"how many of the last messages (default {defaults.OPENCLAW_HISTORY_DEFAULT})",
        ),
        "includeTools": Param("bool", description="include tool results (role toolResult)"),
    },
    "sessions_send": {
        "sessionKey": SESSION_KEY,
        "label": Param("str", max_length=200, description="instead of sessionKey: the title of a visible session"),
        "message": Param("str", required=True, max_length=defaults.MAX_PROMPT_CHARS, description="the message to send"),
        "timeoutSeconds": Param(
            "int", minimum=0,
            description=f"seconds to wait for the reply (default {defaults.OPENCLAW_SEND_TIMEOUT_SECONDS}; "
            "0: send and return at once)",
        ),
    },
    "sessions_spawn": {
        "task": Param("str", required=True, max_length=defaults.MAX_PROMPT_CHARS, description="what the subagent does"),
        "label": Param("str", max_length=200, description="the child session's title"),
        "agentId": Param("str", max_length=64, description="the agent (a provider of this relay) that runs it; "
                         "the caller's own by default, others only from the owner's allow list"),
        "model": Param("str", max_length=200, description="a model of that agent"),
        "thinking": Param("str", max_length=32, description="a thinking level: one of the agent's efforts"),
        "runTimeoutSeconds": Param(
            "int", minimum=0, maximum=defaults.OPENCLAW_RUN_TIMEOUT_MAX_SECONDS,
            description="stop the run after this many seconds (0, the default: the turn's own limit)",
        ),
        "mode": Param("str", choices=("run", "session"), description="run (default): archived after its announce; "
                      "session: the child stays"),
        "cleanup": Param("str", choices=("delete", "keep"), description="delete the child after its announce, or keep it (default)"),
        "sandbox": Param("str", choices=("inherit", "require"), description="require: refuse unless the relay runs tasks in its sandbox"),
    },
}

DESCRIPTIONS = {
    "sessions_list": "List the sessions this conversation may see, with their keys; messageLimit > 0 adds their last messages.",
    "sessions_history": "A session's transcript as role/content records (tool results only with includeTools).",
    "sessions_send": "Send a message to another session and wait up to timeoutSeconds for its reply (0: return at once). "
                     "A reply ping-pong and an announce step follow; reply exactly REPLY_SKIP to end the ping-pong, "
                     "ANNOUNCE_SKIP to post no announce.",
    "sessions_spawn": "Start a subagent in a new session; returns at once with runId and childSessionKey, and its "
                      "result is announced into this conversation (Status, Result, Notes) when it ends.",
}

TOOL_NAMES = tuple(PARAMS)


def input_schema(name: str) -> dict[str, Any]:
    return object_schema(PARAMS[name])


def tool_list() -> list[dict[str, Any]]:
    """`tools/list` of `/mcp/openclaw`: the schemas generated from PARAMS."""
    return [{"name": name, "description": DESCRIPTIONS[name], "inputSchema": input_schema(name)} for name in TOOL_NAMES]


def call_help() -> str:
    """The tools, for the end of `oar call --help`."""
    width = max(len(name) for name in TOOL_NAMES) + 2
    lines = ["", "OpenClaw's session tools (POST /api/v1/openclaw/<tool>, docs/openclaw.md):"]
    lines += [f"  {name.ljust(width)}{DESCRIPTIONS[name].split('; ')[0].split('. ')[0]}" for name in TOOL_NAMES]
    return "\n".join(lines) + "\n"


def tool_help(name: str) -> str:
    """One tool's parameters, for `oar call <tool> --help`, read from PARAMS."""
    params = PARAMS[name]
    required = [key for key, param in params.items() if param.required]
    usage = " ".join([f"oar call {name}", *(f"{key}=…" for key in required), "[key=value ...]"])
    width = max(len(key) for key in params) + 2
    lines = [f"usage: {usage}", "", DESCRIPTIONS[name], "", "parameters:"]
    for key, param in params.items():
        parts = [type_text(param), "required" if param.required else "", limits_text(param)]
        lines.append(f"  {key.ljust(width)}{param.description} ({', '.join(part for part in parts if part)})")
    return "\n".join(lines) + "\n"
