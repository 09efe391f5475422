"""The size of the hardening suites: a short form by default (CI), the full form with OAR_SUITE=full."""

from __future__ import annotations

import os


def full() -> bool:
    """Whether the full form runs (`OAR_SUITE=full python -m pytest tests/test_<suite>.py -s`)."""
    return os.environ.get("OAR_SUITE", "").strip().lower() == "full"


def scale(short: int, full_size: int) -> int:
    """`short` in the short form, `full_size` in the full one."""
    return full_size if full() else short
