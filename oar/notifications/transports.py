"""Sending one notification through a notification URL, with Apprise (docs/notifications.md#channels).

Apprise speaks ntfy, Slack, Discord, Telegram, Matrix, email, plain JSON webhooks and many
more, one URL per service. Such a URL holds the service's token or password, so Apprise's own
log never reaches the relay's (it writes URLs at DEBUG), and an error kept for the Settings
page has every part of the URL but its scheme and host taken out.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

# Apprise (~18 MB of modules) is imported in the functions that check or send: every web
# process imports this module for the Settings routes, and only a sender or a check needs it
# (docs/limits.md#memory).

# Apprise logs the URLs it loads; the relay keeps only the errors it captures below.
_apprise_log = logging.getLogger("apprise")
_apprise_log.propagate = False
_apprise_log.addHandler(logging.NullHandler())

SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31})://")
MAX_ERROR_CHARS = 300
NTFY_SCHEMES = ("ntfy", "ntfys")


def url_is_valid(url: str) -> bool:
    """Whether Apprise knows the URL's service and can read the URL (nothing is sent)."""
    if not url or any(char.isspace() for char in url) or not SCHEME.match(url):
        return False
    import apprise

    try:
        return apprise.Apprise.instantiate(url, suppress_exceptions=True) is not None
    except Exception:  # noqa: BLE001 - a plugin's parser refusing in its own way is a refusal
        return False


def service_of(url: str) -> str | None:
    """The URL's scheme (`ntfy`, `json`, `slack`…): what the Settings page may show of it."""
    found = SCHEME.match(url)
    return found[1].lower() if found else None


def is_ntfy(url: str) -> bool:
    """Whether the URL is ntfy's (`ntfy://`, `ntfys://`), whose notifications carry action buttons."""
    return service_of(url) in NTFY_SCHEMES


def send_url(url: str, title: str, body: str, timeout: float, extras: dict[str, Any] | None = None) -> str | None:
    """Send through Apprise; None when the service took it, else the error (the URL left out).

    `extras`: arguments for the service's Apprise plugin besides those the URL holds (ntfy's
    `click` and `actions`, which its plugin sends as the X-Click and X-Actions headers)."""
    import apprise

    plugin = _plugin(url, extras)
    if plugin is None:
        return "the stored notification URL is no longer one this relay can send to"
    # Apprise's defaults wait up to a minute on a connection; a channel never holds a sender long.
    plugin.socket_connect_timeout = timeout
    plugin.socket_read_timeout = timeout
    sender = apprise.Apprise()
    sender.add(plugin)
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as captured:
        try:
            sent = bool(sender.notify(title=title, body=body))
        except Exception as error:  # noqa: BLE001 - a plugin's failure is the channel's error, never the sender's
            return hidden(f"{type(error).__name__}: {error}", url)
    if sent:
        return None
    lines = [line.strip() for line in captured.getvalue().splitlines() if line.strip()]
    return hidden(lines[-1] if lines else "the service refused the notification", url)


def _plugin(url: str, extras: dict[str, Any] | None) -> Any:
    """The URL's Apprise plugin; with `extras`, built from the URL's parsed arguments and them
    (Apprise's own way in: a dictionary instead of the URL's text)."""
    import apprise
    from apprise import plugins as apprise_plugins

    if not extras:
        return apprise.Apprise.instantiate(url, suppress_exceptions=True)
    parsed = apprise_plugins.url_to_dict(url)
    if parsed is None:
        return None
    return apprise.Apprise.instantiate({**parsed, **extras}, suppress_exceptions=True)


def hidden(message: str, url: str) -> str:
    """`message` with every part of `url` but its scheme and host replaced by `…` (tokens,
    passwords, paths and query values are where a service keeps its secrets)."""
    try:
        parts = urlsplit(url)
        secrets = [parts.username, parts.password, *parts.path.split("/"), *(value for _, value in parse_qsl(parts.query))]
    except ValueError:
        secrets = []
    secrets += [url]
    for secret in sorted({unquote(s) for s in secrets if s and len(s) >= 3} | {s for s in secrets if s and len(s) >= 3},
                         key=len, reverse=True):
        message = message.replace(secret, "…")
    return message[:MAX_ERROR_CHARS]
