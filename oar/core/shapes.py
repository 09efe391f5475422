"""Argument shapes shared by several actions and the owner API's bodies."""

from __future__ import annotations

from oar.core import defaults
from oar.core.fields import Param

RELAY = Param("str", max_length=200, description='"this" or a relay\'s name from list_relays')
SESSION = Param("str", required=True, max_length=64, description="a session id from list_sessions")
TEXT = Param("str", required=True, max_length=defaults.MAX_PROMPT_CHARS, description="the prompt")
WAIT_SECONDS = Param("int", minimum=0, maximum=86_400, description="seconds to wait for the reply")
MODE = Param("str", choices=("agent", "ask", "plan"))
MODEL = Param("str", max_length=200)
EFFORT = Param("str", max_length=32)
PROVIDER = Param("str", max_length=64)
TITLE = Param("str", max_length=200)
GROUP = Param("str", max_length=200, description='a group id or name; "none" leaves the group')
CWD = Param("str", max_length=4096)
