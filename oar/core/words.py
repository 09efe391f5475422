"""Counts in words: `1 session`, `2 sessions`, one helper for every sentence that counts something."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`count` and the noun that agrees with it: `plural(1, "session")` → `1 session`,
    `plural(3, "session")` → `3 sessions`; `nouns` for a plural that is not the noun plus `s`."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
