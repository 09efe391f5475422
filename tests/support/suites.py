"""The size of a suite: its short form by default (CI), its full form with `OAR_SUITE=full`."""

from __future__ import annotations

import os


def full() -> bool:
    """True when the full form of the suites was asked for (`OAR_SUITE=full`)."""
    return os.environ.get("OAR_SUITE", "").strip().lower() == "full"


def scale(short: int, full_size: int) -> int:
    """`full_size` in the full form, else `short`."""
    return full_size if full() else short
