"""Who is calling an action: the `Caller`, and the `CallContext` every handler gets as `ctx`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from oar.core import settings
from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.federation.models import PairingToken
from oar.sessions import sessions, visibility
from oar.turns.turns import Provenance

# The ways in whose calls a caller waits on the answer.
WAITING_CALLS = ("http", "mcp", "peer")


@dataclass(frozen=True)
class Caller:
    """Who calls an action: a conversation on this relay (`relay` None, with its session and, when
    known, the live turn making the call), or an agent on another relay, known by its origin
    relay, session, title, model and the hops its prompt has made once it arrives here."""

    session_id: str
    session_title: str
    model: str | None
    # The relay the call comes from; None: a conversation on this relay.
    relay: str | None = None
    # The calling conversation when it is on this relay, and the turn making the call.
    session: Session | None = None
    turn: Message | None = None
    # Relay crossings behind a remote caller's prompt (a local caller's are read from its turns).
    remote_hops: int = 0
    # The pairing token a remote caller called with: what it is known by here (docs/relays.md#provenance).
    pairing: PairingToken | None = None

    @classmethod
    def local(cls, session: Session, turn: Message | None = None) -> Caller:
        """A conversation on this relay."""
        return cls(session_id=session.id, session_title=session.title, model=session.model, session=session, turn=turn)

    @property
    def is_local(self) -> bool:
        return self.relay is None

    def hops(self) -> int:
        """Relay crossings behind the caller's current turn (0 for the owner's prompts)."""
        if self.session is None:
            return self.remote_hops
        if self.turn is not None:
            return self.turn.hops
        latest = (
            Message.select(Message.hops)
            .where((Message.session == self.session.id) & Message.status.is_null(False))
            .order_by(Message.seq.desc())
            .first()
        )
        return latest.hops if latest else 0


@dataclass
class CallContext:
    """One call as its handler sees it: this relay's runtime, the calling conversation and,
    when known, its running turn."""

    runtime: Runtime
    # The calling conversation's row (a stand-in for an agent on another relay); `caller` below
    # is who calls, as every action sees it (docs/architecture.md#names).
    caller_session: Session
    turn: Message | None = None
    via: str = "http"
    now: datetime = field(default_factory=utcnow)
    # The approval reasons the running action declares (its spec's `approval`, set when it runs).
    approval: tuple[str, ...] = ()
    # When this call's waits must end, below the owner's `max_wait_seconds` (a `time.monotonic()`
    # deadline; None: none): an MCP call without a progress token, which its client would cut after
    # 60 s; and why, for the note. One deadline for the whole call, so a card's wait and then the
    # reply's share it.
    wait_until: float | None = None
    max_wait_reason: str = ""
    _settings: dict[str, Any] | None = None
    _view: visibility.View | None = None
    # An agent on another relay calling through the peer API (`caller_session` is then its stand-in here).
    remote: Caller | None = None
    # The W3C trace context the call came with (an MCP request's `_meta`, a call's headers), which
    # its span continues (oar.core.tracing); None: none, or traces are off.
    trace_carrier: dict[str, str] | None = None
    caller: Caller = field(init=False)

    def __post_init__(self) -> None:
        self.caller = self.remote or Caller.local(self.caller_session, self.turn)

    def with_approval(self, approval: tuple[str, ...]) -> CallContext:
        """This call as an action's handler gets it: a copy holding the approval reasons the action
        declares. Copied as it is, the caller worked out once: `dataclasses.replace` walks the
        fields and builds the caller again, on every call."""
        copied = object.__new__(CallContext)
        copied.__dict__.update(self.__dict__)
        copied.approval = approval
        return copied

    def cap_waits(self, seconds: int, reason: str) -> None:
        self.wait_until = time.monotonic() + seconds
        self.max_wait_reason = reason

    @property
    def max_wait_seconds(self) -> int | None:
        """Whole seconds left before the call's deadline (None: no deadline but the owner's cap)."""
        if self.wait_until is None:
            return None
        return max(0, math.floor(self.wait_until - time.monotonic()))

    @property
    def settings(self) -> dict[str, Any]:
        if self._settings is None:
            # A caller found by its token came with the settings' version (`sessions.session_by_token`).
            self._settings = self.runtime.settings(getattr(self.caller_session, "settings_version", settings.UNREAD))
        return self._settings

    @property
    def relay_name(self) -> str:
        return self.settings["relay_name"]

    @property
    def view(self) -> visibility.View:
        """The sessions this conversation sees and reaches (docs/rules.md#visibility)."""
        if self._view is None:
            self._view = visibility.View(self.caller_session, self.settings["sessions_visibility"])
        return self._view

    def session(self, reference: str) -> Session:
        """The session an argument names on this relay, if this conversation sees it: else refused
        (`REMOTE_RELAY_NOT_FOUND`, or `REMOTE_RELAY_FORBIDDEN` for one outside its view)."""
        return self.view.check(sessions.resolve(reference, self.relay_name))

    @property
    def can_wait(self) -> bool:
        """Someone waits on this call's answer (an HTTP or MCP request), so with no turn of the
        conversation to show a card in, the waiting call is its live turn (docs/rules.md#where-a-card-waits)."""
        return self.via in WAITING_CALLS

    def hops(self) -> int:
        """Relay crossings behind the caller's current turn (0 for the owner's prompts)."""
        return self.caller.hops()

    def prompt_text(self, text: str) -> str:
        """A prompt as it is queued: from another relay's agent, under the line that says so
        (docs/relays.md#hops)."""
        calling = self.caller
        if calling.is_local:
            return text
        parts = [f'relay "{calling.relay}"', f'session "{calling.session_title}"']
        if calling.model:
            parts.append(calling.model)
        parts.append("acting for the user")
        return f"[Remote prompt from an agent on {' · '.join(parts)}]\n{text}"

    def provenance(self) -> Provenance:
        """Provenance of a prompt this caller sends to another session on this relay."""
        calling = self.caller
        return Provenance(
            kind="agent",
            relay=calling.relay,
            session=calling.session_id,
            session_title=calling.session_title,
            model=calling.model,
            hops=calling.hops(),
            acts_for_user=True,
        )
