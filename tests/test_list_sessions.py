"""list_sessions (docs/sessions.md#list_sessions): text search, paging with nextCursor and the
state of each listed session, on the prepared and the built-each-time queries alike."""

from __future__ import annotations

from typing import Any

from tests.support.clients import Agent
from tests.support.relays import Relay


def _ids(answer: dict[str, Any]) -> list[str]:
    return [entry["id"] for entry in answer["sessions"]]


def test_search_paging_and_states(relay: Relay, desk: Agent) -> None:
    alpha = relay.conversation("alpha build")
    beta = relay.conversation("beta build")
    gamma = relay.conversation("gamma")
    found = desk.ok("list_sessions", relay="this", query="build")
    assert sorted(_ids(found)) == sorted([alpha.session_id, beta.session_id])
    assert {entry["state"] for entry in found["sessions"]} == {"idle"}
    assert all(entry["tasks"] == [] for entry in found["sessions"])
    assert _ids(desk.ok("list_sessions", relay="this", query=gamma.session_id[:8].upper())) == [gamma.session_id]

    everything = _ids(desk.ok("list_sessions", relay="this", scope="all", limit=100))
    assert set(everything) >= {desk.session_id, alpha.session_id, beta.session_id, gamma.session_id}
    paged: list[str] = []
    cursor = None
    while True:
        page = desk.ok("list_sessions", relay="this", scope="all", limit=1, **({"cursor": cursor} if cursor else {}))
        paged += _ids(page)
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert paged == everything
    searched_page = desk.ok("list_sessions", relay="this", query="build", limit=1)
    assert len(searched_page["sessions"]) == 1 and searched_page["nextCursor"] is not None
    rest = desk.ok("list_sessions", relay="this", query="build", limit=1, cursor=searched_page["nextCursor"])
    assert sorted(_ids(searched_page) + _ids(rest)) == sorted([alpha.session_id, beta.session_id])
    assert rest["nextCursor"] is None
    assert _ids(desk.ok("list_sessions", relay="this", scope="active")) == []
