"""Calls per sliding minute per conversation (docs/rules.md#rate-limits), wrong owner tokens per
client address on the page's sign-in form (docs/owner-api.md#signing-in), and requests to the
decision links' endpoints per client address (docs/notifications.md#deciding-from-a-notification).

The decision is a pure function of the recent call times and `now`; the times themselves
live in Redis sorted sets, because they are a short-lived cache, not data: a flushed Redis
only forgets the last minute of calls. relay_tool calls, an agent's task starts and stops and
an external agent's long polls count against the same limits (`refuse_over_limit`); the team
tools count against limits of their own (`TEAM_CALLS`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from oar.core import keys
from oar.core.errors import ActionError
from oar.core.runtime import Runtime


def retry_after(
    call_times: Sequence[float],
    write_times: Sequence[float],
    *,
    is_write: bool,
    now: float,
    calls_per_window: int,
    writes_per_window: int,
    window: float,
) -> int | None:
    """Seconds until the call would be allowed, or None when it is allowed now.

    A limit of 0 means no limit.
    """
    waits = []
    for times, limit, applies in (
        (call_times, calls_per_window, True),
        (write_times, writes_per_window, is_write),
    ):
        if not applies or limit <= 0:
            continue
        recent = sorted(t for t in times if t > now - window)
        if len(recent) >= limit:
            # The call becomes possible when the oldest call that keeps us at the limit
            # leaves the window.
            oldest_blocking = recent[len(recent) - limit]
            waits.append(oldest_blocking + window - now)
    if not waits:
        return None
    return max(1, math.ceil(max(waits)))


@dataclass(frozen=True)
class Budget:
    """A count of calls and writes per conversation of its own: its Redis keys' part, the owner
    settings that limit it, and what a refusal calls the calls."""

    name: str
    calls_setting: str
    writes_setting: str
    calls: str


# relay_tool's calls, an agent's task starts and stops, an external agent's long polls.
RELAY_CALLS = Budget("", "rate_calls_per_minute", "rate_writes_per_minute", "calls to the relay")
# The team tools at /mcp/team: chatty by design (an orchestrator's loop polls), so a budget of their own.
TEAM_CALLS = Budget("team", "team_calls_per_minute", "team_writes_per_minute", "team tool calls")


class RateLimiter:
    def __init__(self, connection: redis.Redis, namespace: str, window: float, budget: Budget = RELAY_CALLS) -> None:
        self.connection = connection
        self.namespace = namespace
        self.window = window
        self.budget = budget

    def check_and_record(
        self, conversation: str, *, is_write: bool, calls_per_window: int, writes_per_window: int
    ) -> int | None:
        """Retry-after seconds when over a limit; otherwise records the call and returns None."""
        if calls_per_window <= 0 and writes_per_window <= 0:
            return None
        now = time.time()
        calls_key = keys.rate_calls(self.namespace, conversation, self.budget.name)
        writes_key = keys.rate_writes(self.namespace, conversation, self.budget.name)
        try:
            pipe = self.connection.pipeline()
            for key in (calls_key, writes_key):
                pipe.zremrangebyscore(key, 0, now - self.window)
                pipe.zrange(key, 0, -1, withscores=True)
            _, calls, _, writes = pipe.execute()
            wait = retry_after(
                [score for _, score in calls],
                [score for _, score in writes],
                is_write=is_write,
                now=now,
                calls_per_window=calls_per_window,
                writes_per_window=writes_per_window,
                window=self.window,
            )
            if wait is not None:
                return wait
            member = f"{now:.6f}:{time.perf_counter_ns()}"
            pipe = self.connection.pipeline()
            pipe.zadd(calls_key, {member: now})
            pipe.expire(calls_key, int(self.window) + 1)
            if is_write:
                pipe.zadd(writes_key, {member: now})
                pipe.expire(writes_key, int(self.window) + 1)
            pipe.execute()
        except redis.RedisError:
            return None  # without Redis the relay still serves; it only stops counting
        return None


class FailureLimiter:
    """Failures per key in a sliding window, shared by every web process through Redis.

    `retry_after` is asked before the attempt is judged, so that even the right answer waits
    once the limit is reached: otherwise guessing could go on at full speed.
    """

    def __init__(self, connection: redis.Redis, namespace: str, *, allowed: int, window: float) -> None:
        self.connection = connection
        self.namespace = namespace
        self.allowed = allowed
        self.window = window

    def retry_after(self, address: str) -> int | None:
        """Seconds until `address` may try again, or None when it may try now."""
        now = time.time()
        key = keys.sign_in_failures(self.namespace, address)
        try:
            pipe = self.connection.pipeline()
            pipe.zremrangebyscore(key, 0, now - self.window)
            pipe.zrange(key, 0, -1, withscores=True)
            _, failures = pipe.execute()
        except redis.RedisError:
            return None  # without Redis the form still works; it only stops counting
        return retry_after([score for _, score in failures], [], is_write=False, now=now,
                           calls_per_window=self.allowed, writes_per_window=0, window=self.window)

    def record_failure(self, address: str) -> None:
        now = time.time()
        key = keys.sign_in_failures(self.namespace, address)
        try:
            pipe = self.connection.pipeline()
            pipe.zadd(key, {f"{now:.6f}:{time.perf_counter_ns()}": now})
            pipe.expire(key, int(self.window) + 1)
            pipe.execute()
        except redis.RedisError:
            pass

    def forget(self, address: str) -> None:
        """A right answer: the address's failures are forgiven."""
        try:
            self.connection.delete(keys.sign_in_failures(self.namespace, address))
        except redis.RedisError:
            pass


class AddressLimiter:
    """Requests per client address in a sliding window, shared by every web process through
    Redis: the decision links' endpoints (docs/notifications.md#deciding-from-a-notification).
    A refused request is not counted."""

    def __init__(self, connection: redis.Redis, namespace: str, *, allowed: int, window: float) -> None:
        self.connection = connection
        self.namespace = namespace
        self.allowed = allowed
        self.window = window

    def take(self, address: str) -> int | None:
        """Seconds `address` must wait before its next request, or None: this one is counted and may go on."""
        now = time.time()
        key = keys.decision_requests(self.namespace, address)
        try:
            pipe = self.connection.pipeline()
            pipe.zremrangebyscore(key, 0, now - self.window)
            pipe.zrange(key, 0, -1, withscores=True)
            _, recent = pipe.execute()
            wait = retry_after([score for _, score in recent], [], is_write=False, now=now,
                               calls_per_window=self.allowed, writes_per_window=0, window=self.window)
            if wait is not None:
                return wait
            pipe = self.connection.pipeline()
            pipe.zadd(key, {f"{now:.6f}:{time.perf_counter_ns()}": now})
            pipe.expire(key, int(self.window) + 1)
            pipe.execute()
        except redis.RedisError:
            return None  # without Redis the links still work; they only stop counting
        return None


def refuse_over_limit(
    runtime: Runtime, conversation: str, *, is_write: bool, nothing: str, settings: Mapping[str, Any] | None = None,
    budget: Budget = RELAY_CALLS,
) -> None:
    """Counts one call of the conversation against the owner's limits of `budget` (`settings`:
    the owner's settings, when the caller read them already), or refuses it with
    `REMOTE_RELAY_RATE_LIMITED` (`retryAfterSeconds`) when it is over one; a refused call is not
    counted."""
    if settings is None:
        settings = runtime.settings()
    calls, writes = settings[budget.calls_setting], settings[budget.writes_setting]
    limiter = RateLimiter(runtime.redis, runtime.config.namespace, runtime.time("RATE_WINDOW_SECONDS"), budget)
    wait = limiter.check_and_record(conversation, is_write=is_write, calls_per_window=calls, writes_per_window=writes)
    if wait is not None:
        raise ActionError(
            "REMOTE_RELAY_RATE_LIMITED",
            f"This conversation made too many {budget.calls} in the last minute "
            f"(limits: {calls} calls, {writes} writes). Try again in {wait} s. {nothing}",
            retryAfterSeconds=wait,
        )
