"""Who is calling an action: the calling conversation and, when known, its running turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from oar.core.models import Message, Session
from oar.core.runtime import Runtime
from oar.core.timeutil import utcnow
from oar.turns.turns import Provenance


@dataclass
class CallContext:
    """Who is calling: the calling conversation and, when known, its running turn."""

    runtime: Runtime
    caller: Session
    turn: Message | None = None
    via: str = "http"
    now: datetime = field(default_factory=utcnow)
    _settings: dict[str, Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        if self._settings is None:
            self._settings = self.runtime.settings()
        return self._settings

    @property
    def relay_name(self) -> str:
        return self.settings["relay_name"]

    def hops(self) -> int:
        """Relay crossings behind the caller's current turn (0 for the owner's prompts)."""
        if self.turn is not None:
            return self.turn.hops
        latest = (
            Message.select(Message.hops)
            .where((Message.session == self.caller.id) & Message.status.is_null(False))
            .order_by(Message.seq.desc())
            .first()
        )
        return latest.hops if latest else 0

    def provenance(self) -> Provenance:
        """Provenance of a prompt this caller sends to another session on this relay."""
        return Provenance(
            kind="agent",
            relay=None,
            session=self.caller.id,
            session_title=self.caller.title,
            model=self.caller.model,
            hops=self.hops(),
            acts_for_user=True,
        )
