"""The owner API (docs/owner-api.md), as the benchmark uses it to set a relay up."""

from __future__ import annotations

from typing import Any

import requests


class Owner:
    """Owner calls with the owner token; any answer but 200/201 stops the benchmark."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.http.request(method, f"{self.url}/api/v1/owner{path}", json=body, timeout=30)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{method} {path} → {response.status_code}: {response.text[:500]}")
        return response.json()

    def open_to_agents(self) -> None:
        """Agents may use sessions, with no rate limit: the benchmark calls far past 60/minute."""
        self.call(
            "PATCH",
            "/settings",
            {"agent_sessions_enabled": True, "rate_calls_per_minute": 0, "rate_writes_per_minute": 0},
        )

    def conversation(self, title: str) -> tuple[str, str]:
        """A new owner conversation: (session id, the agent token its agent uses)."""
        created = self.call("POST", "/sessions", {"title": title})
        return created["session"]["id"], created["token"]
