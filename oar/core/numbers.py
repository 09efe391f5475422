"""Numbers read from text the relay is sent: query parameters, headers, form fields, and what a
paired relay answers (docs/errors.md). One strict reader for all of them.

Python's own readers take more than a client means by a number: `str.isdigit()` takes `²`
(which `int()` then refuses, a 500), `int()` takes `٣`, `_` separators and surrounding white
space, and `float()` takes `nan`, `inf` and `1e400`. A `nan` deadline never passes; a run of 30
digits does not fit a 64-bit column. Here a number is ASCII digits only — a minus sign only where
the field takes one — of bounded length, within the field's range: always finite, and always a
value the database can hold.
"""

from __future__ import annotations

import re

from oar.core.errors import ActionError, invalid

# The largest value of a 64-bit signed column, and its number of digits: no number read here is longer.
INT64_MAX = 2**63 - 1
MAX_DIGITS = len(str(INT64_MAX))
# How much of a refused value an error message repeats.
SHOWN_CHARS = 40

_WHOLE = re.compile(f"[0-9]{{1,{MAX_DIGITS}}}")
_SIGNED_WHOLE = re.compile(f"-?[0-9]{{1,{MAX_DIGITS}}}")


def read_whole(text: str, minimum: int = 0, maximum: int = INT64_MAX, *, signed: bool = False) -> int | None:
    """The whole number `text` spells, when it is one from `minimum` to `maximum`; else None.

    Only ASCII digits (and a leading `-` when `signed`), at most 19 of them, nothing around them:
    `²`, `٣`, `1_000`, ` 7`, `7\\n`, `+7`, `0x10`, `nan` and `1e3` are not numbers here."""
    pattern = _SIGNED_WHOLE if signed else _WHOLE
    if not isinstance(text, str) or pattern.fullmatch(text) is None:
        return None
    number = int(text)
    return number if minimum <= number <= maximum else None


def whole_or_refuse(name: str, text: str, *, minimum: int = 0, maximum: int = INT64_MAX, nothing: str) -> int:
    """A query parameter or header holding a whole number: the number when it is one in range,
    else `REMOTE_RELAY_INVALID_INPUT` naming it (never a 500)."""
    number = read_whole(text, minimum, maximum)
    if number is None:
        raise refused_number(name, text, minimum, maximum, nothing)
    return number


def refused_number(name: str, text: str, minimum: int, maximum: int, nothing: str) -> ActionError:
    shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
    bounds = f"of at least {minimum:,}" if maximum == INT64_MAX else f"from {minimum:,} to {maximum:,}"
    return invalid(f'{name} must be a whole number {bounds} in the digits 0–9; got "{shown}". {nothing}'.strip())
