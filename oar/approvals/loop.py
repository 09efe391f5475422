"""Loop protection (docs/rules.md#loop-protection, docs/schedules.md#schedules-into-other-sessions): agents prompting each other without the user.

Every agent-to-agent prompt a conversation sends (`send`, `create_session`, `schedule` into
another session and each of its firings) is counted on the sending conversation. Once the
count is used up, the next counted prompt needs the owner: a call asks a `loop` card, a
schedule firing is held. The count starts over when the owner writes in the conversation or
allows its loop card; whoever starts it over then releases the held firings
(`oar.schedules.schedules.release_held`, which lives above this module).
"""

from __future__ import annotations

from oar.core import defaults
from oar.core.models import Session

# Agent-to-agent prompts a conversation may send before the owner is asked.
THRESHOLD = defaults.LOOP_PROMPTS_BEFORE_CARD


def count_prompt(sender: Session) -> None:
    """One more agent-to-agent prompt from `sender` (inside the write transaction that sends it)."""
    Session.update(loop_prompt_count=Session.loop_prompt_count + 1).where(Session.id == sender.id).execute()


def used_up(sender: Session) -> bool:
    """Whether `sender`'s next agent-to-agent prompt needs the owner (as of the row read)."""
    return sender.loop_prompt_count >= THRESHOLD


def start_over(session_id: str) -> None:
    """The owner wrote in the conversation or allowed its loop card: the count starts over
    (inside the write transaction that records it)."""
    Session.update(loop_prompt_count=0).where(Session.id == session_id).execute()
