"""The owner's service: everything the owner of a relay can do, as plain functions.

Each operation takes the running relay (`Runtime`) as its first argument, checks its input
with the same field checks and texts the owner API has always given, and returns rows or
plain dicts. The owner API (`oar.web.owner`), the page (`oar.web.page`) and the `oar`
command call these functions; none of them knows about HTTP, so a later surface (a peer
API, an MCP endpoint) calls the same code. Nothing here imports Flask.
"""
