"""Where a call on the relay-to-relay API comes from (docs/relays.md#provenance).

The pairing token is the credential; what a call's headers say about its origin (the relay's
name, the conversation, its title and model) is the calling relay's own word, shown as it said
it, like a session's title. No name grants anything by itself:

- A prompt from another relay's agent unlocks, in the conversation it arrives in, only the relay
  this one is paired with that holds the pairing token the call came with. This relay asks the
  paired relay named as the origin (`GET /api/peer/v1/holds?sha256=…`, with this relay's own
  pairing token for it) whether one of its pairings holds a token with that SHA-256: only a relay
  that holds the token can say yes, and the hash says nothing to anyone who does not hold it. A
  holder of another pairing token who names that relay unlocks nothing.
- The hop count a call says is at least 1 here (it made this crossing); the calling relay counts
  the crossings behind its own turns, which this relay cannot see.
"""

from __future__ import annotations

import hmac
import re

from oar.core import ids
from oar.core.errors import ActionError
from oar.core.runtime import Runtime
from oar.federation import peers
from oar.federation.models import PairingToken, Peer

# A pairing token's SHA-256, as `/holds` takes it.
TOKEN_HASH = re.compile("[0-9a-f]{64}")


def arriving_hops(said: int) -> int:
    """The hops of a prompt arriving from another relay: what the calling relay says, and never
    fewer than this one crossing (a caller cannot reset the hop limit by saying 0)."""
    return max(1, said)


def relay_to_unlock(runtime: Runtime, pairing: PairingToken, named: str, session_id: str | None) -> Peer | None:
    """The paired relay that a prompt from the holder of `pairing`, which says it comes from relay
    `named`, unlocks in session `session_id` (None: a new session): one this relay is paired with
    under the name it gave (`remote_name`), not unlocked there yet, that says it holds the token.
    None when there is none, or none proves it (a relay that does not answer proves nothing)."""
    for peer in Peer.select().where(Peer.remote_name == named).order_by(Peer.created_at):
        if session_id is not None and peers.unlocked_by(peer.id, session_id) is not None:
            continue
        if holds(runtime, peer, pairing.token_hash):
            return peer
    return None


def holds(runtime: Runtime, peer: Peer, token_hash: str) -> bool:
    """Whether the paired relay `peer` says it holds the pairing token whose SHA-256 is `token_hash`."""
    wait = runtime.time("PEER_PING_TIMEOUT_SECONDS")
    try:
        answer = peers.link_to(runtime, peer).request("GET", f"/holds?sha256={token_hash}", read_timeout=wait,
                                                       connect_timeout=wait)
    except ActionError:  # offline, or an older relay without /holds: not proven
        return False
    return answer.get("holds") is True


def held_here(token_hash: str) -> bool:
    """Whether one of this relay's pairings holds the pairing token whose SHA-256 is `token_hash`
    (what `/holds` answers)."""
    found = False
    for peer in Peer.select(Peer.token):
        found |= hmac.compare_digest(ids.hash_token(peer.token), token_hash)
    return found
