"""The notification tables (docs/notifications.md): channels, the outbox, what was already
announced, and the owner's browsers' Web Push subscriptions."""

from __future__ import annotations

import peewee as pw

from oar.core.models import BaseModel, JSONField
from oar.core.timeutil import utcnow


class Channel(BaseModel):
    """Where the owner hears about things: the open page, a notification URL (Apprise), Web Push.

    `url` is write-only, like a provider's API key: stored, never returned, logged or quoted."""

    name = pw.CharField(primary_key=True, max_length=64)
    type = pw.CharField(max_length=16)  # a ChannelType
    kinds = JSONField(default=list)  # the notification kinds it receives
    url = pw.TextField(null=True)
    created_at = pw.DateTimeField(default=utcnow)
    updated_at = pw.DateTimeField(default=utcnow)
    last_sent_at = pw.DateTimeField(null=True)
    # The last failure to send (cleared by the next success); never holds the URL.
    last_error = pw.TextField(null=True)
    last_error_at = pw.DateTimeField(null=True)
    # Whether its notifications carry decision links and buttons (docs/notifications.md#deciding-from-a-notification).
    decisions = pw.BooleanField(default=False)

    class Meta:
        table_name = "notification_channel"


class Notification(BaseModel):
    """The outbox: one notification for one channel, still to be sent or sent.

    Rows are written from what the database already holds (pending cards and questions, the
    event log), so a restart or a flushed Redis loses none; `status` moves on by conditional
    UPDATEs, so two senders never send one row twice."""

    id = pw.AutoField()
    channel = pw.ForeignKeyField(Channel, backref="notifications", on_delete="CASCADE")
    channel_id: str
    kind = pw.CharField(max_length=32)
    session_id = pw.CharField(null=True, max_length=32)
    # Notifications of one kind for one session within the merge window become one row.
    merge_key = pw.CharField(max_length=80)
    count = pw.IntegerField(default=1)
    # Cards or questions it announces: a row whose subjects were all answered sends nothing.
    subjects = JSONField(default=list)
    title = pw.CharField(max_length=200)
    body = pw.TextField()
    link = pw.TextField(null=True)
    status = pw.CharField(default="pending", max_length=12)  # a NotificationStatus
    created_at = pw.DateTimeField(default=utcnow)
    due_at = pw.DateTimeField(default=utcnow)
    attempts = pw.IntegerField(default=0)
    # A sender's claim: past it, a sender that died mid-send is presumed gone.
    lease_until = pw.DateTimeField(null=True)
    sent_at = pw.DateTimeField(null=True)
    error = pw.TextField(null=True)
    # Web Push: the subscriptions it already reached, so a retry pushes only to the others.
    pushed_to = JSONField(default=list)

    class Meta:
        table_name = "notification"
        indexes = (
            (("status", "due_at"), False),
            (("channel", "merge_key", "status"), False),
        )


class Announced(BaseModel):
    """What was already turned into notifications (a card, a question, a provider's cap of one
    month), so that each is announced once."""

    key = pw.CharField(primary_key=True, max_length=120)
    created_at = pw.DateTimeField(default=utcnow, index=True)

    class Meta:
        table_name = "notification_announced"


class PushSubscription(BaseModel):
    """One browser's Web Push subscription: its push service's endpoint and the keys its
    payloads are encrypted with (RFC 8291). The endpoint is a capability URL: shown by host only."""

    id = pw.CharField(primary_key=True, max_length=32)
    endpoint = pw.TextField(unique=True)
    p256dh = pw.CharField(max_length=100)
    auth = pw.CharField(max_length=40)
    label = pw.CharField(null=True, max_length=100)
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "push_subscription"


class VapidKey(BaseModel):
    """The relay's VAPID key pair (one row), generated once: its private half is never shown or logged."""

    id = pw.IntegerField(primary_key=True)  # always 1
    private_pem = pw.TextField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "webpush_vapid_key"


class DecisionLink(BaseModel):
    """One decision link (docs/notifications.md#deciding-from-a-notification): a random token,
    stored as its SHA-256 hash, sent in one notification through one channel, that decides one
    card or question once, without signing in. It dies when used, at `expires_at`, when its
    subject is decided any other way, and with its channel."""

    token_hash = pw.CharField(primary_key=True, max_length=64)
    subject = pw.CharField(max_length=32, index=True)  # the card's or the question's id
    subject_kind = pw.CharField(max_length=8)  # card | question
    channel = pw.ForeignKeyField(Channel, backref="decision_links", on_delete="CASCADE")
    channel_id: str
    created_at = pw.DateTimeField(default=utcnow)
    expires_at = pw.DateTimeField(index=True)
    used_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "decision_link"


MODELS: tuple[type[BaseModel], ...] = (Channel, Notification, Announced, PushSubscription, VapidKey, DecisionLink)
