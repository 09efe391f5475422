"""`external`: the turn's reply comes from an agent process attached over HTTP (oar.turns.external, served by oar.web.external).

The process posts `{text}` deltas, `{activity}` lines, `{usage: {input_tokens,
output_tokens}}`, and finally `{done: true}` or `{error: "…"}`; this provider turns them
into the turn's events. It raises questions and tasks through the agents' API like any agent.
"""

from __future__ import annotations

from collections.abc import Iterator

from oar.providers.base import Activity, Provider, TextDelta, TurnControl, TurnEvent, TurnFailed, TurnRequest, Usage

# How long one wait for the attached process's next post lasts before the stop is re-checked.
RECEIVE_SECONDS = 0.5


class ExternalProvider(Provider):
    kind = "external"

    def run_turn(self, request: TurnRequest, control: TurnControl) -> Iterator[TurnEvent]:
        while not control.cancelled.is_set():
            for event in control.services.receive_external(RECEIVE_SECONDS):
                if event.get("text"):
                    yield TextDelta(str(event["text"]))
                if event.get("activity"):
                    yield Activity(str(event["activity"])[:500])
                if isinstance(event.get("usage"), dict):
                    usage = event["usage"]
                    yield Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
                if event.get("error"):
                    yield TurnFailed(str(event["error"])[:2000])
                    return
                if event.get("done"):
                    return
