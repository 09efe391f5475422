"""Counts in words agree with their number (`1 session`, `2 sessions`): the helper and the actions'
summaries. (The page's "watching N sessions" line, shown only when something is watched: test_page.py.)"""

from __future__ import annotations

from oar.core.words import plural
from tests.support.clients import Agent
from tests.support.relays import Relay


def test_it_counts_in_words() -> None:
    assert [plural(n, "session") for n in (0, 1, 2)] == ["0 sessions", "1 session", "2 sessions"]
    assert plural(1, "agent token") == "1 agent token"
    assert plural(2, "reply", "replies") == "2 replies"


def test_the_summaries_agree_with_their_counts(relay: Relay, desk: Agent) -> None:
    assert desk.ok("list_sessions", relay="this")["summary"] == "list_sessions → desk: 1 session (recent)"
    assert desk.ok("list_questions")["summary"] == "list_questions → desk: 0 questions, 0 pending"
    desk.ok("ask", question="Which branch?", options=["main", "dev"])
    assert desk.ok("list_questions")["summary"] == "list_questions → desk: 1 question, 1 pending"
    child = desk.ok("create_session", relay="this", title="child", text="hi", wait_seconds=30)["session"]
    read = desk.ok("read_session", relay="this", session=child)["summary"]
    assert read.endswith(": 2 messages, idle"), read
    assert desk.ok("list_sessions", relay="this")["summary"] == "list_sessions → desk: 2 sessions (recent)"
