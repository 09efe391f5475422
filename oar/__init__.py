"""OAR Relay: a self-hosted relay for AI agent sessions."""

__version__ = "0.1.0"
