"""Which paired relays an owner's message mentions (docs/relays.md#locks): a pure function."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from oar.federation.urls import is_address

# Characters a relay name or host may continue with; a mention ends where they stop.
_NAME_CHARS = r"[\w-]"


@dataclass(frozen=True)
class Named:
    """A paired relay as a message may name it."""

    key: str  # the peer's id
    name: str
    host: str


def mentioned(text: str, relays: Iterable[Named]) -> set[str]:
    """The keys of the relays `text` mentions: `@name` (or `@host`), or the name or host written
    out as a word. A relay whose name or host is an IP address or `localhost` counts written out
    only with `@`, since such words turn up in messages about other things."""
    found: set[str] = set()
    for relay in relays:
        for word in {relay.name, relay.host} - {""}:
            escaped = re.escape(word)
            if re.search(rf"@{escaped}(?!{_NAME_CHARS})", text, re.IGNORECASE):
                found.add(relay.key)
            elif not is_address(word) and re.search(rf"(?<![\w@.-]){escaped}(?!{_NAME_CHARS})", text, re.IGNORECASE):
                found.add(relay.key)
    return found
