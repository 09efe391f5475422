"""Watching sessions (docs/events.md): subscriptions and the delivery engine.

The database is the truth; events (`oar.core.events`) flow through these modules in order:
- `subscription_rules`: which sessions a subscription watches and which events it receives;
- `event_lines`: how one event reads in a delivered message;
- `delivery` (pure) and `quiet_hours`: whether an event is held at all (a reaction's `turn_end` is
  not) and when a held event is due;
- `ingest` → `holding` → `held`: new events become held rows, one per watcher, with due times;
- `due_jobs` → `delivering`: the RQ job of a due time delivers them as one automated message;
- `own_prompts`: a prompt's `turn_end` is held while its sender waits for the reply itself;
- `engine_events`: stalls and heartbeats, the engine's own events;
- `sweep`: the clock's part, for whatever a lost job or a flushed Redis left behind;
- `lifetime` and `views`: ending and transferring subscriptions, and how they are shown.
"""
