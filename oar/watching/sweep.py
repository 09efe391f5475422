"""The clock's sweep of the delivery engine: whatever a lost job or a flushed Redis left behind."""

from __future__ import annotations

from datetime import datetime

from oar.core.runtime import Runtime
from oar.watching import delivering, engine_events, ingest


def sweep(runtime: Runtime, now: datetime) -> dict[str, int]:
    """The clock's part: record stalls, ingest what no job ingested, make due heartbeats,
    deliver whatever is overdue."""
    outcome = {"ingested": 0, "delivered": 0, "stalled": 0, "heartbeats": 0}
    # Stalls are recorded and held like other events while agent sessions are off.
    outcome["stalled"] = engine_events.record_stalls(runtime, now)
    # A backlog is the workers' ingest jobs' to work through; the clock goes on with its other
    # duties after about one period of it.
    outcome["ingested"] = ingest.ingest_pending(runtime, lambda: now, runtime.time("RECONCILE_SECONDS"))
    if not runtime.settings()["agent_sessions_enabled"]:
        return outcome
    outcome["heartbeats"] = engine_events.make_heartbeats(runtime, now)
    # What the delivery jobs did not deliver within a period of its due time (a lost job, a
    # flushed Redis, downtime); on time, the jobs deliver it, and the two would only collide.
    outcome["delivered"] = delivering.deliver_overdue(runtime, lambda: now, runtime.time("RECONCILE_SECONDS"))
    return outcome
