"""Which addresses a paired relay may have, and which owner messages mention one: pure
functions, no network (docs/relays.md#pairing, docs/relays.md#locks)."""

from __future__ import annotations

import pytest

from oar.core.errors import ActionError, peer_http_status
from oar.federation.client import Origin
from oar.federation.mentions import Named, mentioned
from oar.federation.urls import check_peer_url


@pytest.mark.parametrize(("url", "normalised"), [
    ("https://build.example.com/", "https://build.example.com"),
    ("HTTPS://Build.Example.com:8443/relay/", "https://build.example.com:8443/relay"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("http://localhost:8080/", "http://localhost:8080"),
    ("http://10.1.2.3", "http://10.1.2.3"),
    ("http://172.16.0.9", "http://172.16.0.9"),
    ("http://192.168.1.20:80", "http://192.168.1.20:80"),
    ("http://[::1]:9000", "http://[::1]:9000"),
    ("http://[fd00::1]", "http://[fd00::1]"),
    ("http://169.254.1.1", "http://169.254.1.1"),
])
def test_it_accepts_https_anywhere_and_http_only_on_private_networks(url: str, normalised: str) -> None:
    assert check_peer_url(url) == normalised


@pytest.mark.parametrize(("url", "says"), [
    ("http://build.example.com", "Plain http:// is allowed only for loopback and private network"),
    ("http://8.8.8.8", "Plain http:// is allowed only"),
    ("http://172.32.0.1", "Plain http:// is allowed only"),
    ("http://[2606:4700::1111]", "Plain http:// is allowed only"),
    # A name that may resolve to a private address still counts as public: no look-up is made.
    ("http://intranet.local", "Plain http:// is allowed only"),
    ("ftp://build.example.com", "must start with https://"),
    ("file:///etc/passwd", "must start with https://"),
    ("javascript:alert(1)", "must start with https://"),
    ("build.example.com", "must start with https://"),
    ("https://user:secret@build.example.com", "must not hold a user name or password"),
    ("https://user@build.example.com", "must not hold a user name or password"),
    ("https://build.example.com/?token=x", "must not have a query or fragment"),
    ("https://build.example.com/#x", "must not have a query or fragment"),
    ("https:///path", "has no host"),
    ("https://build.example.com:99999", "not a valid address"),
    ("https://build example.com", "spaces or control characters"),
    ("", "Give the other relay's url"),
])
def test_it_refuses_other_addresses_saying_why(url: str, says: str) -> None:
    with pytest.raises(ActionError) as refused:
        check_peer_url(url)
    assert refused.value.code == "REMOTE_RELAY_INVALID_INPUT"
    assert says in refused.value.message and refused.value.message.endswith("Nothing was paired.")


BOX = Named("peer_1", "build-box", "build.example.com")
LOOPBACK = Named("peer_2", "127.0.0.1", "127.0.0.1")
LOCAL = Named("peer_3", "localhost", "localhost")


@pytest.mark.parametrize(("text", "found"), [
    ("have a look at @build-box", {"peer_1"}),
    ("@BUILD-BOX please", {"peer_1"}),
    ("run it on build-box.", {"peer_1"}),
    ("the host build.example.com is up", {"peer_1"}),
    ("build-boxes are not it", set()),
    ("my-build-box is another", set()),
    ("mail me at me@build.example.company", set()),
    # Relays named by an address or localhost: only with @.
    ("the server at 127.0.0.1 is slow", set()),
    ("ask @127.0.0.1", {"peer_2"}),
    ("localhost is fine", set()),
    ("use @localhost", {"peer_3"}),
])
def test_it_finds_the_relays_an_owner_message_mentions(text: str, found: set[str]) -> None:
    assert mentioned(text, [BOX, LOOPBACK, LOCAL]) == found


def test_provenance_headers_round_trip_and_bad_ones_are_refused() -> None:
    origin = Origin(relay="desk", session="3f9c2a1e7b04aa11", session_title="Review: ü/“x”", model="echo-1",
                    mode="plan", hops=1, wait_seconds=600)
    assert Origin.from_headers(origin.headers()) == origin
    headers = origin.headers()
    assert all(value.isascii() for value in headers.values())
    for broken in ({"X-OAR-Hops": "one"}, {"X-OAR-Origin-Mode": "yolo"}, {"X-OAR-Origin-Relay": ""},
                   {"X-OAR-Wait-Seconds": "-1"}, {"X-OAR-Origin-Title": "%ff"}):
        assert Origin.from_headers({**headers, **broken}) is None, broken
    missing = dict(headers)
    del missing["X-OAR-Origin-Session"]
    assert Origin.from_headers(missing) is None


def test_a_peer_answer_without_a_code_keeps_4xx_and_makes_others_502() -> None:
    assert peer_http_status("REMOTE_RELAY_HTTP_404") == 404
    assert peer_http_status("REMOTE_RELAY_HTTP_500") == 502
    assert peer_http_status("REMOTE_RELAY_HTTP_301") == 502
    assert peer_http_status("REMOTE_RELAY_HTTP_12") is None
    assert peer_http_status("REMOTE_RELAY_OFFLINE") is None
    assert ActionError("REMOTE_RELAY_HTTP_418", "x").status == 418
