"""Token meters per provider: what a provider used this calendar month (UTC) against its cap.

Every provider pass that reports tokens adds one `TokenUsage` row; a meter is the sum of
the rows since the first of the month. Pure parts take `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from peewee import fn

from oar.core.models import TokenUsage
from oar.core.timeutil import iso
from oar.providers.base import Provider


@dataclass(frozen=True)
class Meter:
    used: int
    limit: int | None
    resets_at: datetime

    @property
    def capped(self) -> bool:
        return self.limit is not None and self.used >= self.limit

    def view(self) -> dict[str, Any]:
        remaining = None if self.limit is None else max(self.limit - self.used, 0)
        percent = None if not self.limit else min(round(100 * self.used / self.limit, 1), 100.0)
        return {
            "name": "monthly_tokens",
            "used": self.used,
            "limit": self.limit,
            "remaining": remaining,
            "percent": percent,
            "resetsAt": iso(self.resets_at),
        }


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """The start of `now`'s calendar month and the start of the next one (naive UTC)."""
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return start, following


def token_cap(provider: Provider) -> int | None:
    cap = provider.options.get("monthly_token_cap")
    return int(cap) if cap else None


def meter(provider: Provider, now: datetime) -> Meter:
    start, following = month_bounds(now)
    used = (
        TokenUsage.select(fn.COALESCE(fn.SUM(TokenUsage.input_tokens + TokenUsage.output_tokens), 0))
        .where((TokenUsage.provider == provider.name) & (TokenUsage.created_at >= start))
        .scalar()
    )
    return Meter(used=int(used or 0), limit=token_cap(provider), resets_at=following)


def is_metered(provider: Provider) -> bool:
    """Providers billed per token (the wire protocols) or given a cap have a meter."""
    return provider.metered or token_cap(provider) is not None


def record(provider_name: str, model: str | None, session_id: str, turn_id: str, input_tokens: int, output_tokens: int) -> None:
    TokenUsage.create(
        provider=provider_name, model=model, session_id=session_id, turn_id=turn_id,
        input_tokens=max(input_tokens, 0), output_tokens=max(output_tokens, 0),
    )


def status_of(provider: Provider, now: datetime) -> dict[str, Any]:
    """One provider's entry of the `usage` action (docs/sessions.md#usage)."""
    if not is_metered(provider):
        return {"name": provider.name, "status": "untracked", "meters": [], "paused": False}
    if provider.missing_configuration():
        return {"name": provider.name, "status": "not_configured", "meters": [], "paused": False}
    current = meter(provider, now)
    return {
        "name": provider.name,
        "status": "capped" if current.capped else "ok",
        "meters": [current.view()],
        "paused": current.capped,
    }
