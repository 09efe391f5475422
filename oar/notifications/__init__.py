"""Telling the owner: notification channels, what is still to be sent, and sending it
(docs/notifications.md)."""
