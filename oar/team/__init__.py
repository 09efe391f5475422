"""Team runs: the agent-team tools' own store of messages, work items, artifacts, reviews and
memory (docs/team-runs.md)."""
