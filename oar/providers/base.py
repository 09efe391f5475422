"""What a provider is: something that turns one turn into a stream of events (docs/providers.md)."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from oar.core.schema import ToolDefinition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextDelta:
    """More reply text."""

    text: str


@dataclass(frozen=True)
class Activity:
    """A line of tool activity shown in `progress.activities` (e.g. a relay_tool call)."""

    text: str


def relay_tool_activity(payload: dict[str, Any]) -> Activity:
    """`relay_tool send · this · 3f9c2a1e`: the page shows it as `🛰️ send · this · 3f9c2a1e`."""
    parts = [str(payload.get("action", "?"))[:64], str(payload.get("relay") or "this")[:64]]
    session = payload.get("session") or payload.get("from")
    if isinstance(session, str) and session.strip():
        parts.append(session.strip()[:8])
    return Activity("relay_tool " + " · ".join(parts))


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class AgentSession:
    """The agent's own id for this conversation (a cli agent's session, for resuming it)."""

    id: str


# The shape an agent's own session id must have before the relay keeps it or passes it back
# to the agent (docs/providers.md#cli-arguments): it cannot read as an option or a path.
AGENT_SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")


def safe_agent_session_id(value: str | None) -> str | None:
    """The id when it has the safe shape, else None (a leading `-`, a `/`, spaces, too long)."""
    return value if value is not None and AGENT_SESSION_ID.fullmatch(value) else None


@dataclass(frozen=True)
class TaskReported:
    """A background task the agent runs itself (a cli agent's `run_in_background` command or
    subagent). The relay records it as a Task; it never runs, stops or re-runs it."""

    agent_task_id: str
    description: str
    type: str = "local_bash"  # local_bash | subagent
    output_file: str | None = None  # where the agent writes its output, when it said


@dataclass(frozen=True)
class TaskEnded:
    """The agent reported the end of a task it reported earlier in this turn."""

    agent_task_id: str
    status: str  # completed | failed | killed
    note: str | None = None
    output_file: str | None = None  # where the agent wrote its output, when it said only now


@dataclass(frozen=True)
class OutputTruncated:
    """The reply stopped at the output budget even after a continuation (docs/providers.md#output-budget)."""


@dataclass(frozen=True)
class TurnFailed:
    """The turn failed; `message` is the relay's failure text shown to agents."""

    message: str


TurnEvent = TextDelta | Activity | Usage | AgentSession | TaskReported | TaskEnded | OutputTruncated | TurnFailed


@dataclass
class TurnRequest:
    """Everything a provider needs for one turn."""

    session_id: str
    prompt: str
    model: str | None
    effort: str | None
    mode: str
    cwd: str | None
    # `inline`: reasoning goes into one <thinking> block of the reply; `omit`: dropped.
    thinking: str = "omit"
    # The agent's own session id from an earlier turn (cli agents resume with it).
    agent_session_id: str | None = None
    # The relay's folder for this session's agent task output (docs/tasks.md#agent-output-files):
    # a cli agent gets it as its temporary folder; None for providers that run nothing locally.
    task_output_dir: str | None = None
    # Connect and between-bytes timeouts for providers that call a server (docs/limits.md).
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    history: Callable[[], list[dict[str, str]]] = list
    # What the engine gives every LLM turn from the action registry (providers sit below the
    # actions and never build these): the system prompt, byte-stable from turn to turn, and
    # the relay_tool function. Empty and None: the model is given neither.
    system_prompt: str = ""
    relay_tool: ToolDefinition | None = None


class CancelEvent(threading.Event):
    """A turn's stop flag that also runs callbacks when it is set, in the thread that sets it.

    A provider blocked in a read registers one that closes its connection, so that a stop
    needs no thread per stream waking every few milliseconds to look at the flag.
    """

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._callbacks_lock = threading.Lock()

    def set(self) -> None:
        super().set()
        with self._callbacks_lock:
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the flag is set whatever a callback does; the setter goes on
                log.exception("a stop callback failed")

    def on_set(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` once when the flag is set (at once if it is); returns its remover."""
        with self._callbacks_lock:
            if not self.is_set():
                self._callbacks.append(callback)
                return lambda: self._remove(callback)
        callback()
        return lambda: None

    def _remove(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


class TurnServices(Protocol):
    """What a running turn's provider may ask of the relay, given whole to `TurnControl` when the
    turn starts: a provider that calls one the runner does not offer is a type error, not a
    silent no-op."""

    def call_relay_tool(self, args: dict[str, Any]) -> dict[str, Any]:
        """The session's own relay_tool, called as the session."""

    def call_openclaw(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """One of OpenClaw's session tools as the session: (tool name, arguments) → its JSON result."""

    def ask_user(self, question: str, options: list[str], allow_freeform: bool = True) -> str | None:
        """Raise an `ask_user` card and wait for its answer; None when the turn is stopped meanwhile.
        `allow_freeform=False` makes a card answered only with one of its options (Allow/Deny)."""

    def start_task(self, command: str) -> str:
        """Start a background task in the session's cwd; returns its id, raises ActionError when it
        may not run (the owner setting allow_shell_tasks is off, a bad command)."""

    def receive_external(self, seconds: float) -> list[dict[str, Any]]:
        """What an attached `external` agent posted for this turn, waiting up to `seconds`."""

    def note_reachable(self, reachable: bool) -> None:
        """Whether the provider's server answered at all (False: a transport failure), for pickers."""

    def recall(self, key: str) -> str | None:
        """A small note the provider kept about this session between turns (best effort: notes live
        in Redis for a month), e.g. a session title still to be sent to an agent server."""

    def remember(self, key: str, value: str | None) -> None:
        """Keep (None: drop) a note for `recall`."""


@dataclass
class TurnControl:
    """The runner's side of a turn: its stop flag and the relay's services to the provider."""

    services: TurnServices
    cancelled: CancelEvent = field(default_factory=CancelEvent)

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds`; False (at once) when the turn is stopped meanwhile."""
        return not self.cancelled.wait(seconds)


class Provider:
    """Base of every provider kind. Subclasses set `kind` and implement `run_turn`."""

    kind = ""
    default_models: tuple[str, ...] = ()
    default_efforts: tuple[str, ...] = ()
    # Settings a provider honours; others are stored but said to be ignored (docs/sessions.md#update_session).
    supports_thinking = False
    supports_compact_window = False
    # Billed per token: `usage` shows a monthly meter even without a cap.
    metered = False
    # Talks to a server at the configured `base_url` (the wire protocols and agent servers).
    needs_base_url = False
    # Runs an agent on this machine that writes its tasks' output files (the `cli` kind): the
    # runner prepares the session's task output folder for it (docs/tasks.md#agent-output-files).
    writes_task_output = False

    def __init__(self, name: str, options: dict[str, Any], api_key: str | None = None) -> None:
        self.name = name
        self.options = options
        self._api_key = api_key

    @property
    def models(self) -> list[str]:
        return list(self.options.get("models") or self.default_models)

    @property
    def default_model(self) -> str | None:
        configured = self.options.get("default_model")
        if configured in self.models:
            return configured
        return self.models[0] if self.models else None

    def model_for(self, requested: str | None) -> str | None:
        """The model a turn runs on: the session's while it belongs to this provider (or the
        provider lists none), else the provider's default (docs/providers.md: a model the owner removed,
        or one of another provider after a switch, is not sent)."""
        if requested and (not self.models or requested in self.models):
            return requested
        return self.default_model

    @property
    def efforts(self) -> list[str]:
        return list(self.options.get("efforts") or self.default_efforts)

    @property
    def dotted_model_ids(self) -> bool:
        return bool(self.options.get("dotted_model_ids"))

    @property
    def has_api_key(self) -> bool:
        return bool(self._api_key)

    @property
    def workspace(self) -> str:
        return self.options.get("workspace") or "folder"

    @property
    def base_url(self) -> str:
        """The API's URL with its version path, without a trailing slash (docs/owner-api.md#providers)."""
        return str(self.options.get("base_url", "")).rstrip("/")

    def missing_configuration(self) -> str | None:
        """What the provider still needs before it can run turns, or None."""
        if self.needs_base_url and not self.options.get("base_url"):
            return f'Provider "{self.name}" has no base_url.'
        return None

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        raise NotImplementedError
