"""Which addresses a paired relay may have (docs/relays.md#pairing): a pure check, no network."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

from oar.core.errors import invalid

# Host names that mean this machine.
LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
NOTHING = "Nothing was paired."


def check_peer_url(url: str) -> str:
    """The relay's base URL, normalised (no trailing slash), or `REMOTE_RELAY_INVALID_INPUT`.

    `https://` anywhere; plain `http://` only for loopback and private network ranges (an IP
    address in 127/8, ::1, 10/8, 172.16/12, 192.168/16, fc00::/7, link-local, or `localhost`),
    because a token sent in the clear would be read on the way. A host name other than
    `localhost` counts as public even when it resolves to a private address: the check does
    not look names up, so what it allows cannot change with DNS. No user or password in the
    URL, no query or fragment, no other scheme.
    """
    text = (url or "").strip()
    if not text:
        raise invalid(f"Give the other relay's url (https://…). {NOTHING}")
    if len(text) > 2000:
        raise invalid(f"The url is longer than 2000 characters. {NOTHING}")
    if any(ch.isspace() or ord(ch) < 32 for ch in text):
        raise invalid(f"The url holds spaces or control characters. {NOTHING}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as error:
        raise invalid(f"The url is not a valid address ({error}). {NOTHING}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise invalid(f'A paired relay\'s url must start with https:// (or http:// on a private network), not "{scheme or text[:20]}". {NOTHING}')
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise invalid(f"The url must not hold a user name or password: the pairing token is the credential. {NOTHING}")
    host = (parts.hostname or "").lower()
    if not host:
        raise invalid(f"The url has no host. {NOTHING}")
    if parts.query or parts.fragment:
        raise invalid(f"The url must not have a query or fragment: give the relay's base address. {NOTHING}")
    if scheme == "http" and not is_private_host(host):
        raise invalid(
            f'Plain http:// is allowed only for loopback and private network addresses; "{host}" is not one. '
            f"Use https://. {NOTHING}"
        )
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def is_private_host(host: str) -> bool:
    """Whether `host` (a literal address or `localhost`) is on loopback or a private network."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def is_address(host: str) -> bool:
    """Whether `host` is an IP address or `localhost` (such a relay is unlocked only by `@name`)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()
