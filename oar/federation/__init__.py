"""Paired relays: the peer store, pairing tokens and the client that calls another relay
(docs/relays.md)."""
