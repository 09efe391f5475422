"""Argument shapes shared by several actions and the owner API's bodies."""

from __future__ import annotations

from oar.core import defaults
from oar.core.fields import Param

RELAY = Param("str", max_length=200, description='"this" or a relay\'s name from list_relays')
SESSION = Param("str", required=True, max_length=64, description="a session id from list_sessions")
TEXT = Param("str", required=True, max_length=defaults.MAX_PROMPT_CHARS, description="the prompt")
WAIT_SECONDS = Param(
    "int", minimum=0, maximum=86_400,
    description=f"seconds to wait for the reply (default {defaults.DEFAULT_WAIT_SECONDS}, capped by the owner's longest wait)",
)
MODE = Param(
    "str", choices=("agent", "ask", "plan"),
    description="the mode the turns run in; ask and plan ask the owner before each write",
)
MODEL = Param("str", max_length=200, description="a model id from relay_info's providers")
EFFORT = Param("str", max_length=32, description="a reasoning effort from the provider's efforts in relay_info")
PROVIDER = Param("str", max_length=64, description="a provider name from relay_info")
TITLE = Param("str", max_length=200, one_line=True, description="a short title shown in lists and on the page")
GROUP = Param("str", max_length=200, one_line=True, description='a group id or name; "none" leaves the group')
CWD = Param("str", max_length=4096, description="the working folder, under one the owner allows")
