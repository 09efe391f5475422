"""Web Push (docs/notifications.md#web-push): the relay's VAPID keys, the owner's browsers'
subscriptions, and pushing one notification to one of them.

The VAPID key pair is generated once and stored (its private half is write-only, never shown);
payloads are encrypted for each subscription's keys as RFC 8291 says (`aes128gcm`), by
`pywebpush`. A push service that answers 404 or 410 says the subscription is gone: it is removed.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from oar.core import ids
from oar.core.config import Config
from oar.core.db import write_transaction
from oar.core.errors import invalid, not_found
from oar.core.fields import Param, check_fields
from oar.core.timeutil import iso, utcnow
from oar.notifications.channels import HiddenText
from oar.notifications.models import PushSubscription, VapidKey

if TYPE_CHECKING:
    from py_vapid import Vapid

# pywebpush, py_vapid and cryptography's elliptic curves (~40 MB of modules) are imported in
# the functions that use them: every web process imports this module for its routes, and only
# the few that handle a subscription or a push need them (docs/limits.md#memory).

log = logging.getLogger(__name__)

NOTHING = "Nothing was changed."
MAX_ENDPOINT_CHARS = 2000
MAX_SUBSCRIPTIONS = 50
# A push message's payload is at most 4,096 bytes before encryption; a notification is far smaller.
MAX_PAYLOAD_BYTES = 3000
GONE = (404, 410)

FIELDS = {
    "endpoint": Param("str", required=True, max_length=MAX_ENDPOINT_CHARS, description="the push service's URL for this browser"),
    "keys": Param("object", required=True, description='{"p256dh": …, "auth": …} as PushSubscription.toJSON() gives them'),
    "label": Param("str", max_length=100, description="which browser this is, for the Settings page"),
}


# VAPID keys ---------------------------------------------------------------------------------


def vapid_key() -> Vapid:
    """The relay's VAPID key pair, generated the first time it is asked for and stored (two
    processes asking at once keep the one written first)."""
    from py_vapid import Vapid

    row = VapidKey.get_or_none(VapidKey.id == 1)
    if row is None:
        fresh = Vapid()
        fresh.generate_keys()
        with write_transaction():
            VapidKey.insert(id=1, private_pem=HiddenText(fresh.private_pem().decode()), created_at=utcnow()
                            ).on_conflict_ignore().execute()
        row = VapidKey.get(VapidKey.id == 1)
    return Vapid.from_pem(row.private_pem.encode())


def public_key() -> str:
    """The applicationServerKey a browser subscribes with: the public key's point, base64url."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    point = vapid_key().public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    return _b64(point)


def claims_subject(config: Config) -> str:
    """VAPID's `sub`, a contact push services may use: the relay's https URL, else a mailto."""
    if (config.public_url or "").startswith("https://"):
        return config.public_url.rstrip("/")  # type: ignore[union-attr]
    return "mailto:owner@oar-relay.invalid"


# Subscriptions ------------------------------------------------------------------------------


def subscribe(payload: dict[str, Any]) -> PushSubscription:
    """Store a browser's subscription (`PushSubscription.toJSON()` and a label); the same endpoint
    again replaces its keys."""
    args, _ = check_fields("push subscription", FIELDS, payload, strict=True, nothing=NOTHING)
    endpoint = _checked_endpoint(args["endpoint"].strip())
    keys = args["keys"]
    if not isinstance(keys, dict) or set(keys) - {"p256dh", "auth"}:
        raise invalid(f'push subscription: keys must be {{"p256dh": …, "auth": …}}. {NOTHING}')
    p256dh, auth = _checked_keys(keys.get("p256dh"), keys.get("auth"))
    label = (args.get("label") or "").strip() or None
    with write_transaction():
        existing = PushSubscription.get_or_none(PushSubscription.endpoint == endpoint)
        if existing is not None:
            PushSubscription.update(p256dh=p256dh, auth=auth, label=label).where(
                PushSubscription.id == existing.id).execute()
            return PushSubscription.get_by_id(existing.id)
        if PushSubscription.select().count() >= MAX_SUBSCRIPTIONS:
            raise invalid(f"push subscription: at most {MAX_SUBSCRIPTIONS} browsers. {NOTHING}")
        return PushSubscription.create(id=ids.prefixed_id("push"), endpoint=endpoint, p256dh=p256dh, auth=auth,
                                       label=label, created_at=utcnow())


def unsubscribe(subscription_id: str) -> None:
    if not PushSubscription.delete().where(PushSubscription.id == subscription_id).execute():
        raise not_found(f'No push subscription "{subscription_id[:64]}". {NOTHING}')


def listed() -> list[PushSubscription]:
    return list(PushSubscription.select().order_by(PushSubscription.created_at))


def view(subscription: PushSubscription) -> dict[str, Any]:
    """The endpoint is a capability (whoever has it can push): only its host is shown."""
    return {"id": subscription.id, "label": subscription.label, "pushService": urlsplit(subscription.endpoint).hostname,
            "createdAt": iso(subscription.created_at)}


def _checked_endpoint(endpoint: str) -> str:
    refused = invalid(
        "push subscription: endpoint must be the push service's https:// URL (http:// only to this machine's "
        f"loopback). {NOTHING}"
    )
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise refused from None
    if not parts.hostname or any(char.isspace() for char in endpoint) or parts.username or parts.password:
        raise refused
    if parts.scheme == "https" or (parts.scheme == "http" and _is_loopback(parts.hostname)):
        return endpoint
    raise refused


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _checked_keys(p256dh: Any, auth: Any) -> tuple[str, str]:
    """The browser's public key (a P-256 point) and its 16-byte auth secret, base64url."""
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        point = _unb64(p256dh)
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        secret = _unb64(auth)
    except (ValueError, TypeError, binascii.Error):
        raise invalid(f"push subscription: keys.p256dh must be a P-256 public key and keys.auth a 16-byte secret, "
                      f"base64url as the browser gives them. {NOTHING}") from None
    if len(point) != 65 or len(secret) != 16:
        raise invalid(f"push subscription: keys.p256dh must be 65 bytes and keys.auth 16, base64url. {NOTHING}")
    return _b64(point), _b64(secret)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str) or not text or len(text) > 200:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# Pushing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    """One push's outcome: `gone` when the push service says the subscription no longer exists."""

    error: str | None = None
    gone: bool = False


def payload(title: str, body: str, link: str | None, **decision: Any) -> bytes:
    """What the service worker shows (JSON), within what a push message carries; `decision`:
    a decision link's token and actions (oar.notifications.offers.push_fields), when it offers one."""
    data: dict[str, Any] = {"title": title, "body": body, "link": link, **decision}
    encoded = json.dumps(data).encode()
    while len(encoded) > MAX_PAYLOAD_BYTES and data["body"]:
        data["body"] = data["body"][: len(data["body"]) // 2] + "…"
        encoded = json.dumps(data).encode()
    return encoded


def push(subscription: PushSubscription, data: bytes, config: Config, timeout: float) -> Pushed:
    """Push `data` to one subscription, encrypted for its keys (never raises)."""
    from pywebpush import WebPushException, webpush

    info = {"endpoint": subscription.endpoint, "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth}}
    try:
        webpush(info, data=data, vapid_private_key=vapid_key(), vapid_claims={"sub": claims_subject(config)},
                timeout=timeout, ttl=86_400, content_encoding="aes128gcm")
    except WebPushException as error:
        status = error.response.status_code if error.response is not None else None
        if status in GONE:
            return Pushed(gone=True)
        host = urlsplit(subscription.endpoint).hostname
        return Pushed(error=f"the push service at {host} answered {status or 'nothing'}")
    except Exception as error:  # noqa: BLE001 - a network failure is this subscription's error, never the sender's
        host = urlsplit(subscription.endpoint).hostname
        return Pushed(error=f"the push service at {host} could not be reached ({type(error).__name__})")
    return Pushed()
