"""The one strict reader of numbers the relay is sent (oar/core/numbers.py), and what reads with it
without a relay: a paired relay's error codes and a call's provenance headers (docs/relays.md#the-link)."""

from __future__ import annotations

import pytest

from oar.core.errors import ActionError, peer_http_status
from oar.core.fields import has_control_characters, one_line
from oar.core.numbers import INT64_MAX, read_whole, whole_or_refuse
from oar.federation.client import Origin

NOT_NUMBERS = [
    "", " ", "²", "٣", "１", "1²", "nan", "NaN", "inf", "-inf", "Infinity", "1e3", "1.5", "1.", ".5", "0x10", "1_000",
    "+7", " 7", "7 ", "7\n", "\t7", "- 7", "--7", "7-", "%32", "1" * 20, "9" * 19,
]


@pytest.mark.parametrize("text", NOT_NUMBERS, ids=repr)
def test_it_reads_nothing_but_ascii_digits(text: str) -> None:
    assert read_whole(text) is None
    assert read_whole(text, -INT64_MAX, INT64_MAX, signed=True) is None


@pytest.mark.parametrize(("text", "number"), [("0", 0), ("7", 7), ("007", 7), ("60", 60), (str(INT64_MAX), INT64_MAX)])
def test_it_reads_ascii_digits_up_to_the_largest_64_bit_number(text: str, number: int) -> None:
    assert read_whole(text) == number


def test_it_keeps_to_the_range_and_takes_a_sign_only_where_the_field_does() -> None:
    assert read_whole("61", 0, 60) is None and read_whole("60", 0, 60) == 60
    assert read_whole("0", 1) is None
    assert read_whole("-1") is None
    assert read_whole("-1", -5, 5, signed=True) == -1
    assert read_whole("-6", -5, 5, signed=True) is None
    assert read_whole(None, 0, 5) is None  # type: ignore[arg-type]


def test_a_refused_number_names_the_field_the_range_and_what_was_sent() -> None:
    assert whole_or_refuse("after", "42", nothing="Nothing was done.") == 42
    with pytest.raises(ActionError) as refused:
        whole_or_refuse("wait_seconds", "nan", maximum=60, nothing="Nothing was done.")
    assert refused.value.code == "REMOTE_RELAY_INVALID_INPUT" and refused.value.status == 400
    assert refused.value.message == (
        'wait_seconds must be a whole number from 0 to 60 in the digits 0–9; got "nan". Nothing was done.'
    )
    with pytest.raises(ActionError) as long:
        whole_or_refuse("after", "1" * 50, nothing="Nothing was done.")
    assert long.value.message == f'after must be a whole number of at least 0 in the digits 0–9; got "{"1" * 40}…". Nothing was done.'


@pytest.mark.parametrize(("code", "status"), [
    ("REMOTE_RELAY_HTTP_404", 404), ("REMOTE_RELAY_HTTP_500", 502), ("REMOTE_RELAY_HTTP_²²²", None),
    ("REMOTE_RELAY_HTTP_٤٠٤", None), ("REMOTE_RELAY_HTTP_4044", None), ("REMOTE_RELAY_HTTP_40", None),
    ("REMOTE_RELAY_HTTP_404\n", None), ("REMOTE_RELAY_OFFLINE", None),
])
def test_a_paired_relays_http_code_is_three_ascii_digits(code: str, status: int | None) -> None:
    assert peer_http_status(code) == status


PROVENANCE = {"X-OAR-Origin-Relay": "desk", "X-OAR-Origin-Session": "0123456789abcdef", "X-OAR-Origin-Title": "work",
              "X-OAR-Hops": "1"}


@pytest.mark.parametrize("changed", [
    {"X-OAR-Hops": "%C2%B2"}, {"X-OAR-Hops": "²"}, {"X-OAR-Hops": "-1"}, {"X-OAR-Hops": " 1"}, {"X-OAR-Hops": "1001"},
    {"X-OAR-Hops": "1" * 30}, {"X-OAR-Wait-Seconds": "%C2%B2"}, {"X-OAR-Wait-Seconds": "nan"},
    {"X-OAR-Wait-Seconds": "86401"}, {"X-OAR-Wait-Seconds": ""}, {"X-OAR-Origin-Model": "%ED%A0%80"},
    {"X-OAR-Origin-Title": "%FF"}, {"X-OAR-Origin-Relay": "desk%0D%0A[Owner]"}, {"X-OAR-Origin-Session": "a%0Ab"},
    {"X-OAR-Origin-Mode": "fast"},
], ids=repr)
def test_provenance_with_a_bad_count_or_text_is_no_provenance(changed: dict[str, str]) -> None:
    assert Origin.from_headers({**PROVENANCE, **changed}) is None


def test_provenance_reads_its_counts_and_keeps_another_relays_title_on_one_line() -> None:
    origin = Origin.from_headers({**PROVENANCE, "X-OAR-Wait-Seconds": "600", "X-OAR-Origin-Title": "two%0D%0Alines%09here",
                                  "X-OAR-Origin-Model": "echo%E2%80%A81"})
    assert origin is not None
    assert (origin.hops, origin.wait_seconds, origin.session_title, origin.model) == (1, 600, "two  lines here", "echo 1")
    # What a relay sends, it reads back.
    assert Origin.from_headers(origin.headers()) == origin


def test_one_line_text_has_no_control_characters() -> None:
    for text in ("a\nb", "a\rb", "a\tb", "a\x1b[31m", "a\x7f", "a\x85b", "a\u2028b", "a\u2029b", "a\x00b"):
        assert has_control_characters(text) and not has_control_characters(one_line(text)), repr(text)
    for text in ("Release 2.4 · ↗ from desk", "日本語のタイトル", "emoji 🚀", "zero\u200dwidth"):
        assert not has_control_characters(text) and one_line(text) == text
