"""Model discovery: the ids a server lists at `<base_url>/models` (OpenAI and Anthropic shape)."""

from __future__ import annotations

from dataclasses import dataclass

import requests

from oar.providers.sse import error_text, redact

# How long the owner API waits for a server's model list.
DISCOVERY_TIMEOUT_SECONDS = 10.0
# Kinds whose API has a model list.
DISCOVERABLE_KINDS = ("chat", "responses", "anthropic", "runs")


@dataclass(frozen=True)
class Discovered:
    models: list[str]
    note: str | None = None  # why there is no list, when discovery failed
    reachable: bool = True  # False: the server did not answer at all (for pickers)


def discover_models(kind: str, base_url: str, api_key: str | None) -> Discovered:
    headers = {"Accept": "application/json"}
    if api_key:
        if kind == "anthropic":
            headers.update({"x-api-key": api_key, "anthropic-version": "2023-06-01"})
        else:
            headers["Authorization"] = f"Bearer {api_key}"
    url = base_url.rstrip("/") + "/models"
    try:
        # Not followed: requests keeps `x-api-key` on a redirect to another host.
        response = requests.get(url, headers=headers, timeout=DISCOVERY_TIMEOUT_SECONDS, allow_redirects=False)
    except requests.RequestException as error:
        reachable = not isinstance(error, requests.ConnectionError | requests.ConnectTimeout)
        return Discovered([], f"Model discovery failed: {redact(str(error), api_key)[:200]}.", reachable)
    if response.status_code != 200:
        detail = redact(error_text(response.content[:65_536], response.headers.get("content-type", "")), api_key)
        return Discovered([], f"Model discovery failed: {url} answered HTTP {response.status_code} ({detail}).")
    try:
        listed = response.json().get("data")
        models = [str(item["id"]) for item in listed if isinstance(item, dict) and item.get("id")]
    except (ValueError, AttributeError, TypeError):
        return Discovered([], f"Model discovery failed: {url} did not answer a model list.")
    return Discovered(sorted(dict.fromkeys(models)))
